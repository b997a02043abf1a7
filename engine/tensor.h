// Tensor views and their owners. A Tensor never owns memory; a Buffer owns one arena block
// and hands out views. Everything above the kernels passes Tensors.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "engine/arena.h"
#include "engine/dtype.h"
#include "engine/error.h"

namespace strata {

constexpr int kMaxDims = 4;

struct Shape {
  std::array<int64_t, kMaxDims> d{};
  int nd = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    STRATA_CHECK(dims.size() <= kMaxDims, "Shape: too many dims");
    for (int64_t x : dims) d[nd++] = x;
  }
  int64_t operator[](int i) const { return d[i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < nd; ++i) n *= d[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (nd != o.nd) return false;
    for (int i = 0; i < nd; ++i)
      if (d[i] != o.d[i]) return false;
    return true;
  }
  std::string str() const;
};

struct Tensor {
  void* data = nullptr;  // device address (null on the sim backend, or when undefined)
  DType dtype = DType::f32;
  Shape shape;
  std::array<int64_t, kMaxDims> strides{};  // in elements
  bool defined_ = false;

  Tensor() = default;
  Tensor(void* data, DType dtype, Shape shape) : data(data), dtype(dtype), shape(shape), defined_(true) {
    int64_t s = 1;
    for (int i = shape.nd - 1; i >= 0; --i) {
      strides[i] = s;
      s *= shape.d[i];
    }
  }
  bool defined() const { return defined_; }
  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  bool contiguous() const {
    int64_t s = 1;
    for (int i = shape.nd - 1; i >= 0; --i) {
      if (shape.d[i] != 1 && strides[i] != s) return false;
      s *= shape.d[i];
    }
    return true;
  }
  float* f32() const {
    STRATA_CHECK(dtype == DType::f32, "tensor is not f32");
    return static_cast<float*>(data);
  }
  int32_t* i32() const {
    STRATA_CHECK(dtype == DType::i32, "tensor is not i32");
    return static_cast<int32_t*>(data);
  }
  // A view of the same memory with another shape of equal element count.
  Tensor reshape(Shape s) const {
    STRATA_CHECK(s.numel() == numel() && contiguous(), "reshape: element count or layout mismatch");
    return Tensor(data, dtype, s);
  }
};

// Move-only owner of one arena block, viewed as a tensor. The block returns to the arena on
// destruction (or reset()).
class Buffer {
 public:
  Buffer() = default;
  Buffer(Arena& arena, DType dtype, Shape shape, std::string_view tag)
      : arena_(&arena), offset_(arena.allocate(size_t(shape.numel()) * dtype_size(dtype), tag)) {
    view_ = Tensor(arena.ptr(offset_), dtype, shape);
  }
  Buffer(const Buffer&) = delete;  // copies would double-free; move instead
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      arena_ = o.arena_;
      offset_ = o.offset_;
      view_ = o.view_;
      o.arena_ = nullptr;
      o.view_ = Tensor();
    }
    return *this;
  }
  ~Buffer() { reset(); }
  void reset() {
    if (arena_) arena_->free(offset_);
    arena_ = nullptr;
    view_ = Tensor();
  }
  bool allocated() const { return arena_ != nullptr; }
  const Tensor& view() const { return view_; }
  Tensor& view() { return view_; }
  size_t offset() const { return offset_; }

 private:
  Arena* arena_ = nullptr;
  size_t offset_ = 0;
  Tensor view_;
};

}  // namespace strata
