// A test VFS for the run-store tests: it wraps SQLite's default VFS and becomes the default
// itself, so that every connection of the test process (the store's included) goes through it.
// It can make the disk "full" (files may grow by `space` more bytes; a write that would grow
// them further fails with SQLITE_FULL, as ENOSPC does), and it counts the attempts to take a
// WAL store's write lock that were refused because another connection held it, so that a test
// waits for a writer to be blocked instead of waiting for time.
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace store_testing::vfs_shim {

inline std::atomic<int64_t> space{INT64_MAX};  // bytes that files may still grow by
inline std::mutex mutex;
inline std::condition_variable changed;
inline int refused_write_locks = 0;  // guarded by mutex

inline sqlite3_vfs* real_vfs = nullptr;
inline sqlite3_vfs shim_vfs;

struct File {
    sqlite3_file base;
    sqlite3_file* real;  // the default VFS's file, right after this struct
};

inline sqlite3_file* real(sqlite3_file* f) { return reinterpret_cast<File*>(f)->real; }
inline const sqlite3_io_methods* m(sqlite3_file* f) { return real(f)->pMethods; }

inline int x_close(sqlite3_file* f) { return m(f)->xClose(real(f)); }
inline int x_read(sqlite3_file* f, void* b, int n, sqlite3_int64 o) { return m(f)->xRead(real(f), b, n, o); }
inline int x_write(sqlite3_file* f, const void* b, int n, sqlite3_int64 o) {
    sqlite3_int64 size = 0;
    if (m(f)->xFileSize(real(f), &size) != SQLITE_OK) return SQLITE_IOERR_WRITE;
    const int64_t grow = o + n - size;
    if (grow > 0) {
        int64_t left = space.load();
        do {
            if (grow > left) return SQLITE_FULL;
        } while (!space.compare_exchange_weak(left, left - grow));
    }
    return m(f)->xWrite(real(f), b, n, o);
}
inline int x_truncate(sqlite3_file* f, sqlite3_int64 size) { return m(f)->xTruncate(real(f), size); }
inline int x_sync(sqlite3_file* f, int flags) { return m(f)->xSync(real(f), flags); }
inline int x_file_size(sqlite3_file* f, sqlite3_int64* size) { return m(f)->xFileSize(real(f), size); }
inline int x_lock(sqlite3_file* f, int l) { return m(f)->xLock(real(f), l); }
inline int x_unlock(sqlite3_file* f, int l) { return m(f)->xUnlock(real(f), l); }
inline int x_check_reserved(sqlite3_file* f, int* out) { return m(f)->xCheckReservedLock(real(f), out); }
inline int x_file_control(sqlite3_file* f, int op, void* arg) { return m(f)->xFileControl(real(f), op, arg); }
inline int x_sector_size(sqlite3_file* f) { return m(f)->xSectorSize(real(f)); }
inline int x_device(sqlite3_file* f) { return m(f)->xDeviceCharacteristics(real(f)); }
inline int x_shm_map(sqlite3_file* f, int i, int size, int extend, void volatile** p) {
    return m(f)->xShmMap(real(f), i, size, extend, p);
}
inline int x_shm_lock(sqlite3_file* f, int offset, int n, int flags) {
    const int rc = m(f)->xShmLock(real(f), offset, n, flags);
    // Slot 0 of a WAL store's locks is its write lock (BEGIN IMMEDIATE, or a first write).
    if (rc == SQLITE_BUSY && offset == 0 && (flags & SQLITE_SHM_LOCK) && (flags & SQLITE_SHM_EXCLUSIVE)) {
        std::lock_guard lock(mutex);
        ++refused_write_locks;
        changed.notify_all();
    }
    return rc;
}
inline void x_shm_barrier(sqlite3_file* f) { m(f)->xShmBarrier(real(f)); }
inline int x_shm_unmap(sqlite3_file* f, int del) { return m(f)->xShmUnmap(real(f), del); }
inline int x_fetch(sqlite3_file* f, sqlite3_int64 o, int n, void** p) { return m(f)->xFetch(real(f), o, n, p); }
inline int x_unfetch(sqlite3_file* f, sqlite3_int64 o, void* p) { return m(f)->xUnfetch(real(f), o, p); }

inline const sqlite3_io_methods io_methods = {
    3,          x_close,    x_read,         x_write,       x_truncate,    x_sync,        x_file_size,
    x_lock,     x_unlock,   x_check_reserved, x_file_control, x_sector_size, x_device,   x_shm_map,
    x_shm_lock, x_shm_barrier, x_shm_unmap, x_fetch,       x_unfetch,
};

inline int x_open(sqlite3_vfs*, const char* name, sqlite3_file* f, int flags, int* out_flags) {
    auto* file = reinterpret_cast<File*>(f);
    file->real = reinterpret_cast<sqlite3_file*>(file + 1);
    file->real->pMethods = nullptr;
    const int rc = real_vfs->xOpen(real_vfs, name, file->real, flags, out_flags);
    file->base.pMethods = file->real->pMethods ? &io_methods : nullptr;
    return rc;
}

// Makes the shim the default VFS of this process (once).
inline void install() {
    static std::once_flag once;
    std::call_once(once, [] {
        real_vfs = sqlite3_vfs_find(nullptr);
        shim_vfs = *real_vfs;
        shim_vfs.zName = "paralab_test_shim";
        shim_vfs.szOsFile = static_cast<int>(sizeof(File)) + real_vfs->szOsFile;
        shim_vfs.xOpen = x_open;
        sqlite3_vfs_register(&shim_vfs, 1);
    });
}

inline int refused() {
    std::lock_guard lock(mutex);
    return refused_write_locks;
}

// Waits (60 s at most) until more write-lock attempts than `seen` were refused.
inline bool wait_refused_after(int seen) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(60), [&] { return refused_write_locks > seen; });
}

}  // namespace store_testing::vfs_shim
