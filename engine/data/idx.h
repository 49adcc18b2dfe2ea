// IDX files (the MNIST format), gzip-compressed or plain: zlib's gzopen/gzread read both.
//
// An IDX file is a 4-byte magic number {0, 0, type, rank}, `rank` big-endian uint32
// dimensions, then prod(dims) items. MNIST uses type 0x08 (unsigned byte): images rank 3
// {count, rows, cols}, labels rank 1 {count}. Only unsigned bytes are supported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace paralab::data {

struct IdxArray {
    std::vector<int64_t> dims;  // as stored; dims[0] is the item count of the whole file
    std::vector<uint8_t> data;  // the first `count` items (see read_idx), row-major
    int64_t count = 0;          // items read along dims[0]
};

// Reads and validates the header: the magic number (unsigned bytes, `rank` dimensions) and
// non-zero dimensions. Throws paralab::Error "PATH: bad magic number 0x... (expected ...)".
std::vector<int64_t> read_idx_header(const std::string& path, int rank);

// Reads the header and the first `max_items` items along dims[0] (0 = all). Reading all of
// a file also checks that nothing follows the data. Reads in chunks of 4 MiB: 60000 images
// load in a fraction of a second. What the header claims is checked before anything is
// allocated: a product of dimensions beyond 64 GiB ("PATH: implausible dimensions"), and a
// claim beyond what the file can hold (its size when plain; 1032 times its size, deflate's
// largest ratio, when gzip). The buffer then grows with the data read, so a gzip stream that
// ends early costs no more memory than it held. A short file throws
// "PATH: truncated: expected 47040016 bytes of data, got 1000". `stop` is asked before each
// chunk; LoadStopped when it says so.
IdxArray read_idx(const std::string& path, int rank, int64_t max_items = 0,
                  const StopCheck& stop = {});

// The IDX file `base` ("train-images-idx3-ubyte") in `folder`: BASE.gz, BASE, or the
// variants with a dot ("train-images.idx3-ubyte", as some mirrors name them). Empty when
// none exists.
std::string find_idx_file(const std::string& folder, const std::string& base);

// MNIST-format data sets (mnist, fashion-mnist): the four standard files under `folder`.
// Inputs {1, rows, cols} scaled to [0, 1], 10 classes. Limits keep the first N (0 = all)
// and read only what they keep. `name` names the data set in messages. The two splits load
// side by side; a failure or a stop (`stop`, as read_idx) in one ends the other at its next
// chunk.
DataSplits load_mnist_format(const std::string& name, const std::string& folder,
                             int64_t train_limit, int64_t test_limit, const StopCheck& stop = {});

// The four files exist and their headers are valid and consistent; nothing else is read.
void check_mnist_format(const std::string& name, const std::string& folder);

}  // namespace paralab::data
