#include "engine/comm.h"

#include <fmt/format.h>

namespace strata {

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_gather:
      return "all_gather";
    case Collective::all_to_all:
      return "all_to_all";
    case Collective::broadcast:
      return "broadcast";
    case Collective::barrier:
      return "barrier";
    case Collective::reduce:
      return "reduce";
  }
  return "?";
}

CommTicket Communicator::all_reduce_many(const std::vector<Tensor>& ts) {
  if (ts.empty()) STRATA_THROW(Error, "all_reduce_many: no tensors");
  CommTicket t = 0;
  for (const Tensor& x : ts) t = all_reduce(x);
  return t;
}

CommTicket Communicator::broadcast_many(const std::vector<Tensor>& ts, const std::vector<int>& roots) {
  if (ts.empty()) STRATA_THROW(Error, "broadcast_many: no tensors");
  if (roots.size() != ts.size())
    STRATA_THROW(Error, fmt::format("broadcast_many: {} tensors but {} roots", ts.size(), roots.size()));
  CommTicket t = 0;
  for (size_t i = 0; i < ts.size(); ++i) t = broadcast(ts[i], roots[i]);
  return t;
}

CommTicket Communicator::reduce_many(const std::vector<Tensor>& ts, const std::vector<int>& roots) {
  if (ts.empty()) STRATA_THROW(Error, "reduce_many: no tensors");
  if (roots.size() != ts.size())
    STRATA_THROW(Error, fmt::format("reduce_many: {} tensors but {} roots", ts.size(), roots.size()));
  CommTicket t = 0;
  for (size_t i = 0; i < ts.size(); ++i) t = reduce(ts[i], roots[i]);
  return t;
}

namespace {

void check_tensor(const Communicator& c, Collective op, const Tensor& t, const char* which) {
  const char* name = collective_name(op);
  if (!t.defined())
    STRATA_THROW(Error, fmt::format("{} communicator: {}: the {} tensor is undefined", c.name(), name, which));
  if (!t.contiguous())
    STRATA_THROW(UnsupportedError, fmt::format("{} communicator: {}: the {} tensor {} is not contiguous", c.name(),
                                               name, which, t.shape.str()));
  if (!c.supports(t.dtype))
    STRATA_THROW(UnsupportedError,
                 fmt::format("{} communicator: {}: dtype {} is not supported", c.name(), name, dtype_name(t.dtype)));
}

}  // namespace

void check_collective(const Communicator& c, Collective op, const Tensor& out, const Tensor& in, int root) {
  const char* name = collective_name(op);
  const int64_t w = c.world();
  if (op == Collective::barrier) return;
  check_tensor(c, op, out, "output");
  if (op == Collective::all_reduce || op == Collective::broadcast || op == Collective::reduce) {
    if (op != Collective::all_reduce && (root < 0 || root >= w))
      STRATA_THROW(Error, fmt::format("{} communicator: {} {} root {}, but the ranks are 0..{}", c.name(), name,
                                      op == Collective::broadcast ? "from" : "to", root, w - 1));
    return;
  }
  check_tensor(c, op, in, "input");
  if (in.dtype != out.dtype)
    STRATA_THROW(Error, fmt::format("{} communicator: {}: input dtype {} differs from output dtype {}", c.name(), name,
                                    dtype_name(in.dtype), dtype_name(out.dtype)));
  // The chunked collectives cut the flat buffer into world equal chunks (as NCCL does).
  const int64_t big = op == Collective::all_gather ? out.numel() : in.numel();
  const int64_t small = op == Collective::all_gather ? in.numel() : out.numel();
  if (op == Collective::all_to_all) {
    if (in.numel() != out.numel())
      STRATA_THROW(Error, fmt::format("{} communicator: all_to_all: input {} and output {} differ in size", c.name(),
                                      in.shape.str(), out.shape.str()));
    if (in.numel() % w != 0)
      STRATA_THROW(UnsupportedError,
                   fmt::format("{} communicator: all_to_all: {} elements do not split into {} equal chunks (one per "
                               "rank); pad the buffer to a multiple of {}",
                               c.name(), in.numel(), w, w));
    if (in.data && in.data == out.data)
      STRATA_THROW(Error, fmt::format("{} communicator: all_to_all cannot run in place (out == in)", c.name()));
    return;
  }
  if (big % w != 0)
    STRATA_THROW(UnsupportedError,
                 fmt::format("{} communicator: {}: {} elements do not split into {} equal chunks (one per rank); pad "
                             "the buffer to a multiple of {}",
                             c.name(), name, big, w, w));
  if (big != small * w)
    STRATA_THROW(Error, fmt::format("{} communicator: {}: the {} has {} elements, but world size {} x the {}'s {} "
                                    "elements is {}",
                                    c.name(), name, op == Collective::all_gather ? "output" : "input", big, w,
                                    op == Collective::all_gather ? "input" : "output", small, small * w));
}

}  // namespace strata
