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
// a file also checks that nothing follows the data. Reads in big chunks: 60000 images
// load in a fraction of a second. A short file throws
// "PATH: truncated: expected 47040016 bytes of data, got 1000".
IdxArray read_idx(const std::string& path, int rank, int64_t max_items = 0);

// The IDX file `base` ("train-images-idx3-ubyte") in `folder`: BASE.gz, BASE, or the
// variants with a dot ("train-images.idx3-ubyte", as some mirrors name them). Empty when
// none exists.
std::string find_idx_file(const std::string& folder, const std::string& base);

// MNIST-format data sets (mnist, fashion-mnist): the four standard files under `folder`.
// Inputs {1, rows, cols} scaled to [0, 1], 10 classes. Limits keep the first N (0 = all)
// and read only what they keep. `name` names the data set in messages.
DataSplits load_mnist_format(const std::string& name, const std::string& folder,
                             int64_t train_limit, int64_t test_limit);

// The four files exist and their headers are valid and consistent; nothing else is read.
void check_mnist_format(const std::string& name, const std::string& folder);

}  // namespace paralab::data
