// MpiGroup in a build without MPI (configured with PARALAB_MPI=OFF, or no Open MPI found): the
// same interface as mpi.cpp, so that callers build unchanged; asking for the group says why it
// cannot be had (docs/design.md, "Layers": optional parts have a stub).
#include <memory>

#include "engine/comm/mpi.h"

namespace paralab::comm {
namespace {

[[noreturn]] void throw_no_mpi(const char* what) {
    throw Error(std::string("MpiGroup::") + what +
                ": this build has no MPI support (rebuild with Open MPI installed, e.g. Debian's "
                "libopenmpi-dev, and PARALAB_MPI=ON)");
}

}  // namespace

struct MpiGroup::State {};

bool MpiGroup::available() {
    return false;
}

MpiGroup& MpiGroup::world() {
    throw_no_mpi("world");
}

// Unreachable: no MpiGroup is ever made without MPI.
MpiGroup::MpiGroup() {
    throw_no_mpi("MpiGroup");
}

MpiGroup::~MpiGroup() = default;

int MpiGroup::rank() const {
    throw_no_mpi("rank");
}

int MpiGroup::size() const {
    throw_no_mpi("size");
}

Communicator& MpiGroup::communicator() {
    throw_no_mpi("communicator");
}

std::unique_ptr<Communicator> MpiGroup::split_communicator() {
    throw_no_mpi("split_communicator");
}

std::vector<std::string> MpiGroup::all_gather_strings(const std::string&) {
    throw_no_mpi("all_gather_strings");
}

void MpiGroup::send_bytes(int, int, const std::string&) {
    throw_no_mpi("send_bytes");
}

bool MpiGroup::try_recv_bytes(int, int&, std::string&) {
    throw_no_mpi("try_recv_bytes");
}

void MpiGroup::abort_job(const std::string&) {
    throw_no_mpi("abort_job");
}

struct MpiChannel::State {};

MpiChannel::MpiChannel() {
    throw_no_mpi("MpiChannel");
}

MpiChannel::~MpiChannel() = default;

void MpiChannel::send(int, int, const void*, size_t) {
    throw_no_mpi("MpiChannel::send");
}

void MpiChannel::recv(int, int, void*, size_t) {
    throw_no_mpi("MpiChannel::recv");
}

int MpiChannel::tag_ub() const {
    throw_no_mpi("MpiChannel::tag_ub");
}

}  // namespace paralab::comm
