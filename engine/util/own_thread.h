// Running compute on a short-lived thread of its own.
//
// Why: a thread that runs an OpenMP parallel region keeps its team (the worker threads) until
// the thread exits, and libgomp counts those workers for as long. Once it counts more threads
// than there are CPUs, it stops spinning between parallel regions: every later region of every
// thread in the process puts its workers to sleep and wakes them through the kernel. So compute
// on a long-lived thread (the end-of-run evaluation on the thread that called run_experiment,
// which is the GUI's run controller or a benchmark's main thread; the benchmark's sgemm) slows
// every later run of the process. Measured on the 2-core machine: a 2-thread LSTM step took
// 8 ms in a process's first run and 11-15 ms in its next runs, with 200x the context switches.
// Rank threads already end with their run; this helper gives the rest the same lifetime.
#pragma once

#include <exception>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

namespace paralab {

// Runs fn() on a new thread, waits for it, and returns its result or rethrows its exception.
template <class F>
auto on_own_thread(F&& fn) -> std::invoke_result_t<F&> {
    using R = std::invoke_result_t<F&>;
    std::exception_ptr error;
    if constexpr (std::is_void_v<R>) {
        std::thread([&] {
            try {
                fn();
            } catch (...) {
                error = std::current_exception();
            }
        }).join();
        if (error) std::rethrow_exception(error);
    } else {
        std::optional<R> result;
        std::thread([&] {
            try {
                result.emplace(fn());
            } catch (...) {
                error = std::current_exception();
            }
        }).join();
        if (error) std::rethrow_exception(error);
        return std::move(*result);
    }
}

}  // namespace paralab
