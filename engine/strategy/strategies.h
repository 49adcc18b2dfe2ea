// The factories of the strategies, one file each (DESIGN.md §3). Use make_strategy.
#pragma once

#include <memory>

#include "engine/strategy/strategy.h"

namespace paralab::strategy {

std::unique_ptr<Strategy> make_single();          // single.cpp
std::unique_ptr<Strategy> make_data_parallel();   // data_parallel.cpp
std::unique_ptr<Strategy> make_ddp();             // ddp.cpp
std::unique_ptr<Strategy> make_zero();            // zero.cpp
std::unique_ptr<Strategy> make_hogwild();         // hogwild.cpp
std::unique_ptr<Strategy> make_param_server();    // param_server.cpp
std::unique_ptr<Strategy> make_model_parallel();  // model_parallel.cpp
std::unique_ptr<Strategy> make_pipeline();        // pipeline.cpp

}  // namespace paralab::strategy
