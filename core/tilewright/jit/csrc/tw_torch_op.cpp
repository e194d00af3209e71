// tilewright operators' CPU kernel in C++: a call through torch.ops.<ns>.<name> runs the
// compiled kernel's C entry point (the tvm-ffi packed function __tvm_ffi_<name> of its shared
// library) without entering Python.
//
// tilewright.torch_ops.native builds this file once per machine (against the torch headers on
// disk) into tilewright's cache and loads it with ctypes; it talks to it through the C
// functions at the end. Per operator it registers one boxed kernel under a dispatch key, and
// hands it the operator's variants as a flat int64 program (the layout is written down in
// native.py, which encodes it): per kernel parameter its dtype, shape (static sizes, symbols,
// and expressions over symbols as postfix code), alignment, index range and whether an output
// needs a zero fill; per variant the ranges of its symbols and the values its compile-time
// arguments must have. A call takes the first variant whose dtypes, ranks, static sizes and
// compile-time values fit (as the Python dispatch does), checks the rest as the Python
// KernelCall does, allocates the outputs and calls the entry.
//
// Whatever the fast path does not handle -- no variant fits, a check fails, an input must be
// copied (not contiguous, misaligned), an input requires grad, a value is out of range, the
// kernel returns an error -- goes to the operator's Python implementation (a companion
// operator holding it), which runs it or raises the error that names the problem. So the
// fast path never decides an error itself.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <torch/library.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// the tvm-ffi calling convention and DLPack's tensor, as the kernel libraries expect them
struct FFIAny {
  int32_t type_index;
  uint32_t zero_padding;
  union {
    int64_t v_int64;
    double v_float64;
    void* v_ptr;
  };
};
struct DLDeviceC {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataTypeC {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensorC {
  void* data;
  DLDeviceC device;
  int32_t ndim;
  DLDataTypeC dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
using Entry = int (*)(void*, const FFIAny*, int32_t, FFIAny*);

constexpr int32_t kFFIInt = 1, kFFIBool = 2, kFFIFloat = 3, kFFITensor = 7;
constexpr int32_t kDLCPU = 1;
constexpr int kMaxParams = 64;  // more parameters than this always take the Python path
constexpr int kMaxRank = 16;

// postfix expression code (native.py writes the same numbers)
enum Op : int64_t { PUSH = 0, SYM = 1, ADD = 2, SUB = 3, MUL = 4, FLOORDIV = 5, MOD = 6,
                    NEG = 7, MIN = 8, MAX = 9, TRUNCDIV = 10, TRUNCMOD = 11 };
enum DimTag : int64_t { STATIC = 0, SYMBOL = 1, EXPR = 2 };
enum ConstKind : int64_t { CONST_INT = 0, CONST_FLOAT = 1, CONST_BOOL = 2 };

struct Dim {
  int64_t tag, value;  // STATIC: the size; SYMBOL: its index; EXPR: the expression's index
};

struct Param {
  bool tensor = true, output = false;
  int64_t source = 0;  // inputs: the operator argument it comes from
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  DLDataTypeC dl{0, 0, 1};
  int64_t align = 1, index_max = 0;
  bool covered = false;
  std::vector<Dim> dims;
  int32_t ffi = kFFIInt;  // scalars
  int64_t lo = 0, hi = 0;  // integer scalars' range
};

struct Const {
  int64_t arg, kind, bits;  // the operator argument, its kind, its value (a double's bits)
};

struct Variant {
  Entry entry = nullptr;
  std::vector<Param> params;
  int64_t symbols = 0;
  std::vector<std::vector<int64_t>> exprs;
  std::vector<std::array<int64_t, 3>> ranges;  // symbol, low, high
  std::vector<Const> consts;
};

using Variants = std::vector<Variant>;

struct State {
  std::mutex lock;
  std::shared_ptr<const Variants> variants;  // null until set: calls take the Python path
  std::string python_name;  // the companion operator of the Python implementation
  std::optional<c10::OperatorHandle> python;
  int64_t arguments = 0;

  std::shared_ptr<const Variants> get() {
    std::lock_guard<std::mutex> guard(lock);
    return variants;
  }

  c10::OperatorHandle companion() {
    std::lock_guard<std::mutex> guard(lock);
    if (!python)
      python = c10::Dispatcher::singleton().findSchemaOrThrow(python_name.c_str(), "");
    return *python;
  }
};

bool floordiv(int64_t a, int64_t b, int64_t* out) {
  if (b == 0 || (a == INT64_MIN && b == -1)) return false;
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  *out = q;
  return true;
}

// the value of postfix code over the symbols; false on overflow, division by zero or a
// symbol no input set (the Python path then reports it)
bool evaluate(const std::vector<int64_t>& code, const int64_t* symbols, const bool* known,
              int64_t* out) {
  int64_t stack[64];
  int top = 0;
  for (size_t i = 0; i < code.size(); ++i) {
    int64_t op = code[i];
    if (op == PUSH || op == SYM) {
      if (top == 64 || i + 1 >= code.size()) return false;
      int64_t v = code[++i];
      if (op == SYM) {
        if (!known[v]) return false;
        v = symbols[v];
      }
      stack[top++] = v;
      continue;
    }
    if (op == NEG) {
      if (top < 1 || stack[top - 1] == INT64_MIN) return false;
      stack[top - 1] = -stack[top - 1];
      continue;
    }
    if (top < 2) return false;
    int64_t b = stack[--top], a = stack[top - 1], r = 0;
    switch (op) {
      case ADD: if (__builtin_add_overflow(a, b, &r)) return false; break;
      case SUB: if (__builtin_sub_overflow(a, b, &r)) return false; break;
      case MUL: if (__builtin_mul_overflow(a, b, &r)) return false; break;
      case FLOORDIV: if (!floordiv(a, b, &r)) return false; break;
      case MOD: {
        int64_t q;
        if (!floordiv(a, b, &q)) return false;
        r = a - q * b;
        break;
      }
      case MIN: r = a < b ? a : b; break;
      case MAX: r = a > b ? a : b; break;
      case TRUNCDIV: if (b == 0 || (a == INT64_MIN && b == -1)) return false; r = a / b; break;
      case TRUNCMOD: if (b == 0 || (a == INT64_MIN && b == -1)) return false; r = a % b; break;
      default: return false;
    }
    stack[top - 1] = r;
  }
  if (top != 1) return false;
  *out = stack[0];
  return true;
}

// whether the operator's arguments fit the variant's dtypes, ranks, static sizes and
// compile-time values (the Python Variant.accepts, plus an eager kernel's specialisation)
bool accepts(const Variant& v, c10::ArrayRef<c10::IValue> args) {
  for (const Param& p : v.params) {
    if (p.output || !p.tensor) continue;
    const c10::IValue& a = args[p.source];
    if (!a.isTensor()) return false;
    const at::Tensor& t = a.toTensor();
    if (t.scalar_type() != p.dtype || t.dim() != static_cast<int64_t>(p.dims.size()))
      return false;
    auto sizes = t.sizes();
    for (size_t d = 0; d < p.dims.size(); ++d)
      if (p.dims[d].tag == STATIC && sizes[d] != p.dims[d].value) return false;
  }
  for (const Const& c : v.consts) {
    const c10::IValue& a = args[c.arg];
    if (c.kind == CONST_INT) {
      if (!a.isInt() || a.toInt() != c.bits) return false;
    } else if (c.kind == CONST_BOOL) {
      if (!a.isBool() || a.toBool() != (c.bits != 0)) return false;
    } else {
      double want;
      std::memcpy(&want, &c.bits, sizeof want);
      if (!a.isDouble() || a.toDouble() != want) return false;
    }
  }
  return true;
}

// Runs the variant if every check passes: true with the outputs in `outs`; false when the
// call must take the Python path (which runs it or raises the error).
bool run(const Variant& v, c10::ArrayRef<c10::IValue> args, std::vector<at::Tensor>& outs) {
  const size_t n = v.params.size();
  if (n > kMaxParams || v.symbols > kMaxParams) return false;
  int64_t symbols[kMaxParams];
  bool known[kMaxParams] = {false};
  FFIAny packed[kMaxParams];
  DLTensorC tensors[kMaxParams];
  std::vector<int64_t> shapes[kMaxParams];  // the outputs' shapes
  const bool grad = c10::GradMode::is_enabled();
  for (size_t i = 0; i < n; ++i) {  // inputs: checks, and the symbols they set
    const Param& p = v.params[i];
    if (p.output) continue;
    const c10::IValue& a = args[p.source];
    std::memset(&packed[i], 0, sizeof(FFIAny));
    if (!p.tensor) {
      packed[i].type_index = p.ffi;
      if (p.ffi == kFFIFloat) {
        if (a.isDouble()) packed[i].v_float64 = a.toDouble();
        else if (a.isInt()) packed[i].v_float64 = static_cast<double>(a.toInt());
        else return false;
      } else if (p.ffi == kFFIBool) {
        if (!a.isBool()) return false;
        packed[i].v_int64 = a.toBool();
      } else {
        if (!a.isInt()) return false;
        int64_t value = a.toInt();
        if (value < p.lo || value > p.hi) return false;
        packed[i].v_int64 = value;
      }
      continue;
    }
    const at::Tensor& t = args[p.source].toTensor();  // accepts() checked it is a tensor
    if (!t.device().is_cpu() || !t.is_contiguous() || (grad && t.requires_grad())) return false;
    if (t.numel() > p.index_max) return false;
    void* data = t.data_ptr();
    if (reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(p.align)) return false;
    auto sizes = t.sizes();
    for (size_t d = 0; d < p.dims.size(); ++d) {
      if (p.dims[d].tag != SYMBOL) continue;
      int64_t s = p.dims[d].value;
      if (known[s] && symbols[s] != sizes[d]) return false;
      if (sizes[d] > p.index_max) return false;
      symbols[s] = sizes[d];
      known[s] = true;
    }
    tensors[i] = DLTensorC{data, {kDLCPU, 0}, static_cast<int32_t>(sizes.size()), p.dl,
                           const_cast<int64_t*>(sizes.data()), nullptr, 0};
    packed[i].type_index = kFFITensor;
    packed[i].v_ptr = &tensors[i];
  }
  for (const auto& r : v.ranges)
    if (!known[r[0]] || symbols[r[0]] < r[1] || symbols[r[0]] > r[2]) return false;
  for (size_t i = 0; i < n; ++i) {  // dimensions given by expressions: inputs checked
    const Param& p = v.params[i];
    if (!p.tensor) continue;
    for (size_t d = 0; d < p.dims.size(); ++d) {
      int64_t size = p.dims[d].value;
      if (p.dims[d].tag == EXPR && !evaluate(v.exprs[size], symbols, known, &size)) return false;
      if (p.dims[d].tag == SYMBOL) {
        if (!known[size]) return false;
        size = symbols[size];
      }
      if (p.output) {
        if (size < 0) return false;
        shapes[i].push_back(size);
      } else if (p.dims[d].tag == EXPR && args[p.source].toTensor().size(d) != size) {
        return false;
      }
    }
  }
  outs.clear();
  for (size_t i = 0; i < n; ++i) {  // outputs: allocated, zero-filled unless covered
    const Param& p = v.params[i];
    if (!p.output) continue;
    auto options = at::TensorOptions().dtype(p.dtype);
    outs.push_back(p.covered ? at::empty(shapes[i], options) : at::zeros(shapes[i], options));
    const at::Tensor& t = outs.back();
    std::memset(&packed[i], 0, sizeof(FFIAny));
    tensors[i] = DLTensorC{t.data_ptr(), {kDLCPU, 0}, static_cast<int32_t>(t.dim()), p.dl,
                           const_cast<int64_t*>(t.sizes().data()), nullptr, 0};
    packed[i].type_index = kFFITensor;
    packed[i].v_ptr = &tensors[i];
  }
  FFIAny result;
  std::memset(&result, 0, sizeof result);
  return v.entry(nullptr, packed, static_cast<int32_t>(n), &result) == 0;
}

class Kernel final : public c10::OperatorKernel {
 public:
  explicit Kernel(std::shared_ptr<State> state) : state_(std::move(state)) {}

  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack* stack) {
    auto variants = state_->get();
    if (variants) {
      auto args = torch::jit::last(*stack, state_->arguments);
      for (const Variant& v : *variants) {
        if (!accepts(v, args)) continue;
        std::vector<at::Tensor> outs;
        if (!run(v, args, outs)) break;
        torch::jit::drop(*stack, state_->arguments);
        for (auto& t : outs) stack->emplace_back(std::move(t));
        return;
      }
    }
    state_->companion().callBoxed(stack);
  }

 private:
  std::shared_ptr<State> state_;
};

struct Handle {
  std::shared_ptr<State> state;
  std::unique_ptr<torch::Library> library;
};

thread_local std::string last_error;

c10::ScalarType scalar_type(int64_t code, int64_t bits) {
  using S = c10::ScalarType;
  switch (code * 1000 + bits) {
    case 8: return S::Char;
    case 16: return S::Short;
    case 32: return S::Int;
    case 64: return S::Long;
    case 1008: return S::Byte;
    case 1016: return S::UInt16;
    case 1032: return S::UInt32;
    case 1064: return S::UInt64;
    case 2016: return S::Half;
    case 2032: return S::Float;
    case 2064: return S::Double;
    case 4016: return S::BFloat16;
    case 6008: return S::Bool;
    case 10008: return S::Float8_e4m3fn;
    case 12008: return S::Float8_e5m2;
    default: throw std::runtime_error("unknown DLPack dtype " + std::to_string(code) + "/" +
                                      std::to_string(bits));
  }
}

// reads the program native.py writes; throws on a malformed one
struct Reader {
  const int64_t* at;
  const int64_t* end;
  int64_t next() {
    if (at >= end) throw std::runtime_error("truncated variant program");
    return *at++;
  }
  int64_t count(int64_t limit) {
    int64_t n = next();
    if (n < 0 || n > limit) throw std::runtime_error("bad count in variant program");
    return n;
  }
};

Variants decode(const int64_t* program, int64_t length, const int64_t* entries,
                int64_t arguments) {
  Reader r{program, program + length};
  Variants out(r.count(1024));
  for (size_t k = 0; k < out.size(); ++k) {
    Variant& v = out[k];
    v.entry = reinterpret_cast<Entry>(static_cast<uintptr_t>(entries[k]));
    v.params.resize(r.count(kMaxParams));
    v.symbols = r.count(kMaxParams);
    for (Param& p : v.params) {
      p.tensor = r.next() == 0;
      p.output = r.next() != 0;
      p.source = r.next();
      if (!p.output && (p.source < 0 || p.source >= arguments))
        throw std::runtime_error("argument index out of range");
      if (p.tensor) {
        int64_t code = r.next(), bits = r.next();
        p.dtype = scalar_type(code, bits);
        p.dl = DLDataTypeC{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
        p.align = r.next();
        p.index_max = r.next();
        p.covered = r.next() != 0;
        if (p.align < 1) throw std::runtime_error("bad alignment");
        p.dims.resize(r.count(kMaxRank));
        for (Dim& d : p.dims) {
          d.tag = r.next();
          d.value = r.next();
          if (d.tag == SYMBOL && (d.value < 0 || d.value >= v.symbols))
            throw std::runtime_error("symbol index out of range");
        }
      } else {
        p.ffi = static_cast<int32_t>(r.next());
        p.lo = r.next();
        p.hi = r.next();
      }
    }
    v.exprs.resize(r.count(1024));
    for (auto& e : v.exprs) {
      e.resize(r.count(4096));
      for (auto& x : e) x = r.next();
    }
    for (const Param& p : v.params)
      for (const Dim& d : p.dims)
        if (d.tag == EXPR && (d.value < 0 || d.value >= static_cast<int64_t>(v.exprs.size())))
          throw std::runtime_error("expression index out of range");
    v.ranges.resize(r.count(kMaxParams));
    for (auto& range : v.ranges) {
      for (auto& x : range) x = r.next();
      if (range[0] < 0 || range[0] >= v.symbols) throw std::runtime_error("bad range");
    }
    v.consts.resize(r.count(kMaxParams));
    for (Const& c : v.consts) {
      c.arg = r.next();
      c.kind = r.next();
      c.bits = r.next();
      if (c.arg < 0 || c.arg >= arguments) throw std::runtime_error("bad constant");
    }
  }
  if (r.at != r.end) throw std::runtime_error("trailing data in variant program");
  return out;
}

}  // namespace

extern "C" {

// The message of the last failed call of this thread.
const char* tw_op_error() { return last_error.c_str(); }

// Registers the C++ kernel of `ns::name` for dispatch key `key` (its Python implementation
// is the operator `ns::python_name`, defined before the first call); every call takes the Python path
// until tw_op_set_variants. Returns a handle, or null (see tw_op_error).
void* tw_op_register(const char* ns, const char* name, const char* python_name,
                     const char* key, int64_t arguments) {
  try {
    auto state = std::make_shared<State>();
    state->arguments = arguments;
    state->python_name = std::string(ns) + "::" + python_name;
    auto handle = std::make_unique<Handle>();
    handle->state = state;
    handle->library = std::make_unique<torch::Library>(
        torch::Library::IMPL, ns, c10::parseDispatchKey(key), __FILE__, __LINE__);
    handle->library->impl(name, torch::CppFunction::makeFromBoxedFunctor(
                                    std::make_unique<Kernel>(state)));
    return handle.release();
  } catch (const c10::Error& e) {
    last_error = e.what_without_backtrace();
    return nullptr;
  } catch (const std::exception& e) {
    last_error = e.what();
    return nullptr;
  }
}

// Replaces the operator's variants with those of `program` (entries: their entry points).
// Returns 0, or -1 (tw_op_error).
int tw_op_set_variants(void* handle, const int64_t* program, int64_t length,
                       const int64_t* entries) {
  try {
    auto* h = static_cast<Handle*>(handle);
    auto variants = std::make_shared<const Variants>(
        decode(program, length, entries, h->state->arguments));
    std::lock_guard<std::mutex> guard(h->state->lock);
    h->state->variants = std::move(variants);
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return -1;
  }
}

// Unregisters the kernel.
void tw_op_destroy(void* handle) { delete static_cast<Handle*>(handle); }

}  // extern "C"
