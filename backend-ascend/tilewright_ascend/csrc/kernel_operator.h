// The subset of the Ascend C API that tilewright-ascend generates, for the CPU emulator.
//
// Calls do not run when the kernel body reaches them: each data or synchronisation
// instruction is queued on its pipe (MTE1, MTE2, MTE3, M, V, FIX, S) together with the
// bytes it reads and writes; scalar code (loops, index arithmetic) runs at once. The
// runtime (tw_emu.cpp) then executes the queues adversarially -- each pipe as late as its
// flags allow -- and checks every access against per-byte shadow state.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#define __global__
#define __aicore__
#define __gm__
#define GM_ADDR uint8_t*
#define KERNEL_TASK_TYPE_DEFAULT(type)
#define ASCEND_IS_AIC (::tw_emu::is_aic())
#define ASCEND_IS_AIV (::tw_emu::is_aiv())
#define TW_DEBUG_NAME(t) ::tw_emu::name_tensor((t), #t)
#define TW_LINE int line = __builtin_LINE()

using half = _Float16;
struct bfloat16_t {
    uint16_t bits;
    bfloat16_t() = default;
    bfloat16_t(float f) { uint32_t u; std::memcpy(&u, &f, 4); bits = uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16); }
    operator float() const { uint32_t u = uint32_t(bits) << 16; float f; std::memcpy(&f, &u, 4); return f; }
};

namespace tw_emu {
enum Pipe : int { PS = 0, PV, PM, PMTE1, PMTE2, PMTE3, PFIX, NPIPE };
enum Space : int { SGM = 0, SUB, SL1, SL0A, SL0B, SL0C, NSPACE };
// ``core``: whose memory (-1: the issuing core's; 1, 2: vector sub-core 0, 1 of the group)
struct Acc { int space; uint64_t off; uint64_t len; bool write; int core = -1; };

bool is_aic();
bool is_aiv();
int block_idx();
int block_num();
int sub_block_idx();
uint8_t* space_base(int space);
uint8_t* core_space_base(int core, int space);  // a memory of another core of the group
void error(int line, const char* fmt, ...);
void init_buffer(int space, uint64_t bytes, int line);
bool check_local(int space, uint64_t off, uint64_t bytes, int line);
void name_range(int space, uint64_t off, uint64_t len, const char* name);
// queues an instruction; false (and an error reported) when it touches memory outside its space
bool issue(int pipe, const char* what, int line, std::vector<Acc> acc, std::function<void()> fn,
           double cost, uint64_t bytes);
void issue_set(int src, int dst, int id, int line);
void issue_wait(int src, int dst, int id, int line);
void issue_barrier_all(int line);
void issue_pipe_barrier(int pipe, int line);
void issue_cross_set(int pipe, int id, int mode, int line);
void issue_cross_wait(int id, int line);
void fence_last();                 // the scalar unit stalls until the last instruction is done
// the scalar unit branches on what it read: run the instructions issued so far until this
// core's last scalar read is done; when they cannot finish it, the core stalls while the other
// cores of the group issue more (``line``: the branch, where a read that can never finish is
// reported)
void settle(int line);
int atomic_mode();                 // 0 none, 1 add, 2 max, 3 min (SetAtomic*)
void set_atomic(int mode);
void assert_fail(int line, const char* msg);

// Scalar values. C++ computes on the scalar unit in the types the generated code names, and the
// emulator computes in the same types: an operator's result has the type of C++'s usual
// arithmetic conversions and is a value of that type after each operator. Where C++ leaves a
// result undefined the emulator picks the NPU's (a generated file never relies on it:
// codegen/expr.py wraps signed arithmetic through the unsigned type):
// - integer +, -, * and << wrap modulo 2**bits of the result type (two's complement, computed
//   in the unsigned type of that width: the host's own signed overflow would be undefined);
// - a half result is the float result rounded to half once (C++ gives _Float16 operands and
//   results; float holds every sum, difference and product of two halves exactly and rounds a
//   quotient to 24 bits, which leaves the one rounding to half correct);
// - an integer division by zero or of the type's minimum by -1 is reported (x86 traps on it).
// bfloat16_t computes as float (its conversion operator), as in C++.
template <typename X> double as_double(const X& x) {
    if constexpr (std::is_same<X, bfloat16_t>::value) return double(float(x)); else return double(x);
}
// C++'s conversion to T: an integer to an integer wraps modulo 2**bits of T (C++20's rule, the
// compilers' before it); a floating value to an integer truncates towards zero (past the
// type's range, wrapping through int64_t); bfloat16_t converts through float
template <typename T, typename X> T convert(const X& x) {
    if constexpr (std::is_same<T, X>::value) return x;
    else if constexpr (std::is_same<T, bool>::value) return as_double(x) != 0;
    else if constexpr (std::is_integral<T>::value && std::is_integral<X>::value) return T(x);
    else if constexpr (std::is_integral<T>::value) return T(int64_t(as_double(x)));
    else if constexpr (std::is_same<T, bfloat16_t>::value || std::is_same<X, bfloat16_t>::value) return T(float(x));
    else return static_cast<T>(x);
}
// x OP y for a binary operator f on values of the result type R (see above)
template <typename R, typename F> R arith(R x, R y, F f) {
    if constexpr (std::is_integral<R>::value && !std::is_same<R, bool>::value) {
        using W = std::conditional_t<(sizeof(R) > sizeof(unsigned)), std::make_unsigned_t<R>, unsigned>;
        return R(f(W(x), W(y)));  // W never promotes to int: unsigned arithmetic wraps
    } else if constexpr (std::is_same<R, half>::value) {
        return half(f(float(x), float(y)));
    } else {
        return f(x, y);
    }
}

// A value the scalar unit reads from memory (GetValue), of type T: known once that read has
// run, so instructions issued after it take it lazily; arithmetic on it stays lazy. ``line``:
// the source line of the read, where an error of its arithmetic is reported.
// A branch or loop condition on it (contextual conversion to bool) settles it: issue stops
// there, as the scalar unit stalls on the read, and goes on down the arm the value picks.
template <typename T> struct Lazy {
    std::function<T()> f;
    int line = 0;
    T get() const { return f(); }
    explicit operator bool() const { settle(line); return bool(f()); }
};
template <typename X> struct lazy_of_type { using type = X; static constexpr bool lazy = false; };
template <typename T> struct lazy_of_type<Lazy<T>> { using type = T; static constexpr bool lazy = true; };
template <typename X> using value_t = typename lazy_of_type<std::decay_t<X>>::type;
template <typename X> constexpr bool is_lazy = lazy_of_type<std::decay_t<X>>::lazy;
template <typename X> value_t<X> now(const X& x) { if constexpr (is_lazy<X>) return x.get(); else return x; }
template <typename X> int line_of(const X& x) { if constexpr (is_lazy<X>) return x.line; else return 0; }
template <typename A, typename B> int line_of(const A& a, const B& b) { return line_of(a) ? line_of(a) : line_of(b); }
template <typename F> auto later(int line, F f) { using T = decltype(f()); return Lazy<T>{std::function<T()>(f), line}; }
// the value as a double (the vector instructions' scalar operands)
template <typename X> double val(const X& x) { return as_double(now(x)); }
template <typename A, typename B> using either_lazy = std::enable_if_t<is_lazy<A> || is_lazy<B>>;
// +, -, *: the usual arithmetic conversions, then arith
#define TW_LAZY_ARITH(OP)                                                                      \
    template <typename A, typename B, typename = either_lazy<A, B>>                            \
    auto operator OP(const A& a, const B& b) {                                                 \
        using R = decltype(std::declval<value_t<A>>() OP std::declval<value_t<B>>());          \
        return later(line_of(a, b), [=] {                                                      \
            return arith<R>(convert<R>(now(a)), convert<R>(now(b)), [](auto x, auto y) { return x OP y; }); \
        });                                                                                    \
    }
TW_LAZY_ARITH(+) TW_LAZY_ARITH(-) TW_LAZY_ARITH(*)
#undef TW_LAZY_ARITH
// comparisons, logic and the bitwise operators (no result leaves its type); >> of a negative
// value is arithmetic
#define TW_LAZY_EXACT(OP)                                                                      \
    template <typename A, typename B, typename = either_lazy<A, B>>                            \
    auto operator OP(const A& a, const B& b) {                                                 \
        return later(line_of(a, b), [=] { return now(a) OP now(b); });                         \
    }
TW_LAZY_EXACT(<) TW_LAZY_EXACT(<=) TW_LAZY_EXACT(>) TW_LAZY_EXACT(>=) TW_LAZY_EXACT(==)
TW_LAZY_EXACT(!=) TW_LAZY_EXACT(&&) TW_LAZY_EXACT(||) TW_LAZY_EXACT(&) TW_LAZY_EXACT(|)
TW_LAZY_EXACT(^) TW_LAZY_EXACT(>>)
#undef TW_LAZY_EXACT
// << has the left operand's promoted type, wrapping as arith does
template <typename A, typename B, typename = either_lazy<A, B>> auto operator<<(const A& a, const B& b) {
    using R = decltype(std::declval<value_t<A>>() << std::declval<value_t<B>>());
    return later(line_of(a, b), [=] {
        return arith<R>(convert<R>(now(a)), R(0), [y = now(b)](auto x, auto) { return x << y; });
    });
}
template <typename T> auto operator!(const Lazy<T>& a) { return later(a.line, [=] { return !now(a); }); }
template <typename T> auto operator~(const Lazy<T>& a) { return later(a.line, [=] { return ~now(a); }); }
template <typename T> auto operator-(const Lazy<T>& a) {  // an integer wraps; -0.0 keeps its sign
    using R = decltype(-std::declval<T>());
    return later(a.line, [=] {
        if constexpr (std::is_integral<R>::value) return arith<R>(R(0), R(now(a)), [](auto x, auto y) { return x - y; });
        else return R(-now(a));
    });
}
// / and % of integers truncate towards zero (the printer emits them for operands it proves
// non-negative; TW_FLOORDIV/TW_FLOORMOD otherwise); ``divides`` checks what C++ leaves undefined
template <typename R> bool divides(R x, R y, int line) {
    if constexpr (std::is_integral<R>::value) {
        if (y == 0) { error(line, "integer division by zero on the scalar unit (undefined in C++)"); return false; }
        if (std::is_signed<R>::value && y == R(-1) && x == std::numeric_limits<R>::min()) {
            error(line, "integer division of the type's minimum by -1 on the scalar unit (undefined in C++)");
            return false;
        }
    }
    return true;
}
template <typename A, typename B, typename = either_lazy<A, B>> auto operator/(const A& a, const B& b) {
    using R = decltype(std::declval<value_t<A>>() / std::declval<value_t<B>>());
    const int line = line_of(a, b);
    return later(line, [=] {
        R x = convert<R>(now(a)), y = convert<R>(now(b));
        if constexpr (std::is_same<R, half>::value) return half(float(x) / float(y));
        else return divides(x, y, line) ? R(x / y) : R(0);
    });
}
template <typename A, typename B, typename = either_lazy<A, B>> auto operator%(const A& a, const B& b) {
    using R = decltype(std::declval<value_t<A>>() % std::declval<value_t<B>>());
    const int line = line_of(a, b);
    return later(line, [=] { R x = convert<R>(now(a)), y = convert<R>(now(b)); return divides(x, y, line) ? R(x % y) : R(0); });
}
template <typename T, typename U> auto cast(const U& u) {
    if constexpr (is_lazy<U>) return later(u.line, [=] { return convert<T>(now(u)); });
    else return convert<T>(u);
}
// T.reinterpret (the generated TW_BITCAST): the bits of a U as a T of the same width
template <typename T, typename U> T bits_as(U u) {
    static_assert(sizeof(T) == sizeof(U), "T.reinterpret keeps the width");
    T t;
    std::memcpy(&t, &u, sizeof(T));
    return t;
}
template <typename T, typename U, typename X> auto bitcast(const X& x) {
    if constexpr (is_lazy<X>) return later(x.line, [=] { return bits_as<T>(convert<U>(now(x))); });
    else return bits_as<T>(convert<U>(x));
}
// ?:'s type: the usual arithmetic conversions of the arms
template <typename A, typename B>
using select_t = std::decay_t<decltype(true ? std::declval<value_t<A>>() : std::declval<value_t<B>>())>;
template <typename C, typename A, typename B> auto select(const C& c, const A& a, const B& b) {
    if constexpr (is_lazy<C> || is_lazy<A> || is_lazy<B>) {
        using R = select_t<A, B>;
        return later(line_of(c) ? line_of(c) : line_of(a, b),
                     [=] { return now(c) ? convert<R>(now(a)) : convert<R>(now(b)); });
    } else {
        return c ? a : b;
    }
}
// The generated TW_SELECT: C's ?: runs only the arm its condition picks, so a read it guards
// (a GetValue of the padding around an image, im2col's) is never issued. A condition known only
// once a GetValue has run cannot pick at issue time: then both arms are issued.
template <typename R, typename V> Lazy<R> lazy_as(const V& v) {
    return later(line_of(v), [=] { return convert<R>(now(v)); });
}
template <typename C, typename FA, typename FB> auto select_arm(const C& c, FA fa, FB fb) {
    using A = decltype(fa());
    using B = decltype(fb());
    if constexpr (is_lazy<C>) {
        return select(c, fa(), fb());
    } else if constexpr (is_lazy<A> || is_lazy<B>) {
        using R = select_t<A, B>;
        return c ? lazy_as<R>(fa()) : lazy_as<R>(fb());
    } else {
        return c ? fa() : fb();
    }
}
// floor division and modulo (the generated code's TW_FLOORDIV/TW_FLOORMOD): round towards -inf
template <typename A, typename B> auto floordiv(const A& a, const B& b) {
    if constexpr (is_lazy<A> || is_lazy<B>) {
        using R = decltype(std::declval<value_t<A>>() / std::declval<value_t<B>>());
        const int line = line_of(a, b);
        return later(line, [=] {
            R x = convert<R>(now(a)), y = convert<R>(now(b));
            if (!divides(x, y, line)) return R(0);
            R q = x / y;
            return (x % y != 0 && ((x < 0) != (y < 0))) ? R(q - 1) : q;
        });
    } else {
        auto q = a / b;
        return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
    }
}
template <typename A, typename B> auto floormod(const A& a, const B& b) {
    if constexpr (is_lazy<A> || is_lazy<B>) {
        using R = decltype(std::declval<value_t<A>>() % std::declval<value_t<B>>());
        const int line = line_of(a, b);
        return later(line, [=] {
            R x = convert<R>(now(a)), y = convert<R>(now(b));
            if (!divides(x, y, line)) return R(0);
            R r = x % y;
            return (r != 0 && ((r < 0) != (y < 0))) ? R(r + y) : r;
        });
    } else {
        auto r = a % b;
        return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
}
// the generated TW_ISNAN and TW_FABS: C's x != x and x < 0 ? -x : x on the scalar unit
template <typename X> auto isnan_of(const X& x) {
    if constexpr (is_lazy<X>) return later(x.line, [=] { auto v = now(x); return v != v; });
    else return x != x;
}
template <typename V> V fabs_value(V v) { return v < 0 ? convert<V>(-v) : v; }
template <typename X> auto fabs_of(const X& x) {
    if constexpr (is_lazy<X>) return later(x.line, [=] { return fabs_value(now(x)); });
    else return fabs_value(x);
}
template <typename A, typename B> auto lmin(const A& a, const B& b) { return select(a < b, a, b); }
template <typename A, typename B> auto lmax(const A& a, const B& b) { return select(a > b, a, b); }
template <typename T> Lazy<T> get_value(int space, uint64_t off, const T* p, int line) {
    auto slot = std::make_shared<T>();
    if (issue(PS, "GetValue", line, {Acc{space, off, sizeof(T), false}}, [=] { *slot = *p; }, 1.0, sizeof(T)))
        fence_last();
    return Lazy<T>{[slot] { return *slot; }, line};
}
template <typename T, typename U> void set_value(int space, uint64_t off, T* p, const U& v, int line) {
    issue(PS, "SetValue", line, {Acc{space, off, sizeof(T), true}}, [=] { *p = convert<T>(now(v)); }, 1.0, sizeof(T));
}
const char* space_name(int space);
template <typename T> const char* type_name();
}  // namespace tw_emu

namespace AscendC {
enum class TPosition { GM, VECIN, VECOUT, VECCALC, A1, A2, B1, B2, CO1, CO2 };
enum pipe_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_FIX, PIPE_ALL };
// the events of impl/basic_api/kernel_event.h (HardEvent); which core has which is checked
// when a flag is issued (HardEventAic / HardEventAiv of the same header)
#define TW_EV(a, b) a##_##b = PIPE_##a * 8 + PIPE_##b
enum class HardEvent : int {
    TW_EV(MTE2, MTE1), TW_EV(MTE1, MTE2), TW_EV(MTE1, M), TW_EV(M, MTE1), TW_EV(MTE2, V),
    TW_EV(V, MTE2), TW_EV(MTE3, V), TW_EV(V, MTE3), TW_EV(M, V), TW_EV(V, M), TW_EV(V, V),
    TW_EV(MTE3, MTE1), TW_EV(MTE1, MTE3), TW_EV(MTE1, V), TW_EV(MTE2, M), TW_EV(M, MTE2),
    TW_EV(V, MTE1), TW_EV(M, FIX), TW_EV(FIX, M), TW_EV(MTE3, MTE2), TW_EV(MTE2, MTE3),
    TW_EV(S, V), TW_EV(V, S), TW_EV(S, MTE2), TW_EV(MTE2, S), TW_EV(S, MTE3), TW_EV(MTE3, S),
    TW_EV(MTE2, FIX), TW_EV(FIX, MTE2), TW_EV(FIX, S), TW_EV(M, S), TW_EV(FIX, MTE3),
    TW_EV(MTE1, FIX), TW_EV(FIX, MTE1), TW_EV(FIX, FIX),
};
#undef TW_EV
enum class RoundMode { CAST_NONE, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD, UNKNOWN };

inline constexpr int space_of(TPosition p) {
    return p == TPosition::A1 || p == TPosition::B1 ? tw_emu::SL1
         : p == TPosition::A2 ? tw_emu::SL0A
         : p == TPosition::B2 ? tw_emu::SL0B
         : p == TPosition::CO1 ? tw_emu::SL0C
         : p == TPosition::GM ? tw_emu::SGM : tw_emu::SUB;
}

template <typename T> struct GlobalTensor {
    T* ptr = nullptr;
    void SetGlobalBuffer(__gm__ T* p, uint64_t = 0) { ptr = p; }
    GlobalTensor operator[](uint64_t i) const { GlobalTensor g; g.ptr = ptr + i; return g; }
    uint64_t addr() const { return (uint64_t)(uintptr_t)ptr; }
    T* data() const { return ptr; }
    static constexpr int space = tw_emu::SGM;
    auto GetValue(uint64_t i, TW_LINE) const { return tw_emu::get_value<T>(tw_emu::SGM, addr() + i * sizeof(T), ptr + i, line); }
    template <typename U> void SetValue(uint64_t i, const U& v, TW_LINE) const { tw_emu::set_value<T>(tw_emu::SGM, addr() + i * sizeof(T), ptr + i, v, line); }
};

template <typename T> struct LocalTensor {
    int space = tw_emu::SUB;
    uint64_t off = 0;  // bytes from the start of the memory
    uint8_t* base = nullptr;
    uint32_t count = 0;
    LocalTensor operator[](uint64_t i) const {
        LocalTensor t = *this; t.off += i * sizeof(T); t.count = count > i ? count - i : 0; return t;
    }
    T* data() const { return reinterpret_cast<T*>(base + off); }
    T* GetPhyAddr() const { return data(); }  // the UB address a vector function takes
    // the same bytes as another element type (LocalTensor::ReinterpretCast, kernel_tensor.h)
    template <typename U> LocalTensor<U> ReinterpretCast() const {
        LocalTensor<U> t; t.space = space; t.off = off; t.base = base;
        t.count = uint32_t(uint64_t(count) * sizeof(T) / sizeof(U)); return t;
    }
    uint64_t addr() const { return off; }
    uint32_t GetSize() const { return count; }
    auto GetValue(uint64_t i, TW_LINE) const { return tw_emu::get_value<T>(space, off + i * sizeof(T), data() + i, line); }
    template <typename U> void SetValue(uint64_t i, const U& v, TW_LINE) const { tw_emu::set_value<T>(space, off + i * sizeof(T), data() + i, v, line); }
};

template <TPosition P> struct TBuf {
    uint64_t size = 0;
    template <typename T> LocalTensor<T> GetWithOffset(uint32_t count, uint32_t offset, TW_LINE) {
        LocalTensor<T> t; t.space = space_of(P); t.off = offset; t.count = count;
        t.base = tw_emu::space_base(t.space);
        if (offset + uint64_t(count) * sizeof(T) > size)
            tw_emu::error(line, "GetWithOffset: %llu bytes at offset %u exceed the %llu bytes "
                          "given to this TBuf", (unsigned long long)count * sizeof(T), offset,
                          (unsigned long long)size);
        tw_emu::check_local(t.space, offset, uint64_t(count) * sizeof(T), line);
        return t;
    }
    template <typename T> LocalTensor<T> Get(TW_LINE) { return GetWithOffset<T>(size / sizeof(T), 0, line); }
};

// impl/basic_api/kernel_tpipe_impl.h (__NPU_ARCH__ 2201): on the cube core the constructor
// sets M_MTE1 ids 0, 1 and 2 (for the Matmul library's L0 ping-pong and the bias load) and the
// destructor waits for them; a kernel that sets one of them again sets a raised flag.
struct TPipe {
    int line_;
    TPipe(TW_LINE) : line_(line) {
        if (tw_emu::is_aic())
            for (int id = 0; id < 3; ++id) tw_emu::issue_set(tw_emu::PM, tw_emu::PMTE1, id, line);
    }
    ~TPipe() {
        if (tw_emu::is_aic())
            for (int id = 0; id < 3; ++id) tw_emu::issue_wait(tw_emu::PM, tw_emu::PMTE1, id, line_);
    }
    template <TPosition P> void InitBuffer(TBuf<P>& buf, uint32_t bytes, TW_LINE) {
        buf.size = bytes; tw_emu::init_buffer(space_of(P), bytes, line);
    }
};

struct DataCopyParams {
    uint16_t blockCount = 1, blockLen = 0, srcStride = 0, dstStride = 0;
    DataCopyParams() = default;
    DataCopyParams(uint16_t c, uint16_t l, uint16_t s, uint16_t d)
        : blockCount(c), blockLen(l), srcStride(s), dstStride(d) {}
};
// Cube operand formats (fractal = 16 rows x C0 elements = 512 bytes, C0 = 32 / sizeof(T)):
//   L1 "NZ": column blocks of C0 elements, each holding every row; element (r, c) at
//     (c / C0) * dstNzC0Stride * C0 + r * dstNzNStride * C0 + c % C0 (strides in 32-byte units)
//   L0A "ZZ": fractals row-major over (m block, k block), each row-major inside
//   L0B "ZN": fractals row-major over (k block, n block), each column-major (n) inside
//   L0C "NZ": 16 x 16 fractals column-major over (n block, m block), row-major inside
struct Nd2NzParams {
    uint16_t ndNum = 1, nValue = 0, dValue = 0, srcNdMatrixStride = 0, srcDValue = 0,
             dstNzC0Stride = 0, dstNzNStride = 1, dstNzMatrixStride = 0;
    Nd2NzParams() = default;
    // DataCopy（GMToL1随路转换-ND2NZ搬运）.md: ndNum <= 4095, nValue <= 16384, dValue <= 65535,
    // srcNdMatrixStride <= 65535, srcDValue in [1, 65535], dstNzC0Stride and dstNzNStride in
    // [1, 16384], dstNzMatrixStride <= 16384; the fields are 16 bits, so a larger value wraps:
    // the constructor takes the values whole and the copy reports any outside its range
    int64_t given[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    bool whole = false;  // constructed from whole values (then checked)
    Nd2NzParams(int64_t nd, int64_t n, int64_t d, int64_t srcMat, int64_t srcD, int64_t c0s,
                int64_t ns, int64_t dstMat)
        : ndNum(uint16_t(nd)), nValue(uint16_t(n)), dValue(uint16_t(d)), srcNdMatrixStride(uint16_t(srcMat)),
          srcDValue(uint16_t(srcD)), dstNzC0Stride(uint16_t(c0s)), dstNzNStride(uint16_t(ns)),
          dstNzMatrixStride(uint16_t(dstMat)), given{nd, n, d, srcMat, srcD, c0s, ns, dstMat}, whole(true) {}
};
// repeatTimes fractals: source fractal startIndex + i * srcStride (512-byte units) goes to
// destination fractal i * (1 + dstGap); ifTranspose transposes each 16 x 16 fractal (2-byte
// types only, as LoadData2D on the hardware).
struct LoadData2DParams {
    uint16_t startIndex = 0;
    uint8_t repeatTimes = 0;
    uint16_t srcStride = 0;
    uint8_t sid = 0;
    uint16_t dstGap = 0;
    bool ifTranspose = false;
    uint8_t addrMode = 0;
};
// repeatTimes x (blockNum 32-byte blocks, then dstGap blocks skipped), all set to initValue
template <typename T> struct InitConstValueParams {
    uint16_t repeatTimes = 0, blockNum = 0, dstGap = 0;
    T initValue = T(0);
    InitConstValueParams() = default;
    InitConstValueParams(uint16_t r, uint16_t b, uint16_t g, T v) : repeatTimes(r), blockNum(b), dstGap(g), initValue(v) {}
};
// LoadDataWithTranspose for 4-byte types: iteration i takes the two consecutive 16 x C0
// fractals at square startIndex + i * srcStride (1024-byte units) as one 16 x 16 square
// [F0 | F1], transposes it and splits the result into two 16 x C0 fractals (the transposes of
// the square's rows 0-7 and 8-15); the first goes to destination fractal i * (1 + dstGap), the
// second 1 + dstFracGap fractals after it (512-byte units).
struct LoadData2dTransposeParams {
    uint16_t startIndex = 0;
    uint8_t repeatTimes = 0;
    uint16_t srcStride = 0;
    uint16_t dstGap = 0;
    uint16_t dstFracGap = 0;
    uint8_t addrMode = 0;
};
struct MmadParams { uint16_t m = 0, n = 0, k = 0; bool cmatrixInitVal = true; bool isBias = false; };
enum class QuantMode_t { NoQuant, F322F16, F322BF16 };
// L0C -> GM: mSize x nSize; srcStride = distance between the L0C column blocks in rows of 16
// elements (the padded M), dstStride = GM row stride in elements (CFG_ROW_MAJOR: NZ -> ND)
struct FixpipeParamsV220 {
    uint16_t nSize = 0, mSize = 0;
    uint32_t srcStride = 0, dstStride = 0;
    QuantMode_t quantPre = QuantMode_t::NoQuant;
    bool reluEn = false;
    uint8_t ndNum = 1;
};
// include/basic_api/kernel_struct_fixpipe.h (__NPU_ARCH__ 3510): L0C -> UB parameters;
// dualDstCtl 0: the UB of sub-core subBlockId, 1: rows [0, M/2) to sub-core 0's UB and the
// rest to sub-core 1's, 2: columns [0, N/2) and the rest; dstStride: a UB row in elements
enum class CO2Layout { NZ, ROW_MAJOR, COLUMN_MAJOR };
template <CO2Layout format = CO2Layout::ROW_MAJOR> struct FixpipeParamsArch3510 {
    uint16_t nSize = 0, mSize = 0, srcStride = 0;
    uint32_t dstStride = 0;
    QuantMode_t quantPre = QuantMode_t::NoQuant;
    bool reluEn = false;
    uint8_t unitFlag = 0, dualDstCtl = 0;
    bool subBlockId = false;
};
struct FixpipeConfig { bool rowMajor; };
inline constexpr FixpipeConfig CFG_ROW_MAJOR{true};
inline constexpr FixpipeConfig CFG_NZ{false};
struct ShapeInfo {
    uint32_t dims = 0, shape[8] = {0};
    ShapeInfo() = default;
    ShapeInfo(uint32_t n, const uint32_t* s) : dims(n) { for (uint32_t i = 0; i < n && i < 8; ++i) shape[i] = s[i]; }
};

inline int64_t GetBlockIdx() { return tw_emu::is_aiv() ? tw_emu::block_idx() * 2 + tw_emu::sub_block_idx() : tw_emu::block_idx(); }
inline int64_t GetSubBlockIdx() { return tw_emu::sub_block_idx(); }
inline int64_t GetBlockNum() { return tw_emu::block_num(); }

template <typename T> inline tw_emu::Acc acc(const LocalTensor<T>& t, uint64_t bytes, bool w) {
    return tw_emu::Acc{t.space, t.off, bytes, w};
}
template <typename T> inline tw_emu::Acc acc(const GlobalTensor<T>& t, uint64_t bytes, bool w) {
    return tw_emu::Acc{tw_emu::SGM, t.addr(), bytes, w};
}

// -- GM stores under SetAtomicAdd/Max/Min ---------------------------------------------------
template <typename T, typename... U> constexpr bool one_of() { return (std::is_same<T, U>::value || ...); }
// integers add, compare and wrap in their own type (exact beyond 2^24), floats in float
template <typename T> inline void atomic_store(T* d, const T* s, uint64_t n, int mode) {
    for (uint64_t i = 0; i < n; ++i) {
        if constexpr (std::is_integral<T>::value) {
            int64_t a = int64_t(d[i]), b = int64_t(s[i]);
            d[i] = mode == 1 ? T(uint64_t(a) + uint64_t(b)) : mode == 2 ? T(a > b ? a : b)
                 : mode == 3 ? T(a < b ? a : b) : s[i];
        } else {
            float a = float(d[i]), b = float(s[i]);
            d[i] = mode == 1 ? T(a + b) : mode == 2 ? T(std::fmax(a, b)) : mode == 3 ? T(std::fmin(a, b)) : s[i];
        }
    }
}
// the element types SetAtomicAddImpl, SetAtomicMaxImpl and SetAtomicMinImpl assert
// (impl/basic_api/dav_c220/kernel_operator_set_atomic_impl.h)
template <typename T> constexpr bool a2_atomic() { return one_of<T, half, float, int16_t, int32_t, int8_t, bfloat16_t>(); }
template <typename T> void SetAtomicAdd() { static_assert(a2_atomic<T>(), "SetAtomicAdd: A2 does not take this element type"); tw_emu::set_atomic(1); }
template <typename T> void SetAtomicMax() { static_assert(a2_atomic<T>(), "SetAtomicMax: A2 does not take this element type"); tw_emu::set_atomic(2); }
template <typename T> void SetAtomicMin() { static_assert(a2_atomic<T>(), "SetAtomicMin: A2 does not take this element type"); tw_emu::set_atomic(3); }
inline void SetAtomicNone() { tw_emu::set_atomic(0); }

// -- strided block copies ---------------------------------------------------------------
template <typename T> inline void strided(T* dst, const T* src, const DataCopyParams& p) {
    const uint64_t per = 32 / sizeof(T), len = p.blockLen * per;
    for (uint32_t b = 0; b < p.blockCount; ++b)
        std::memcpy(dst + b * (len + p.dstStride * per), src + b * (len + p.srcStride * per), len * sizeof(T));
}
template <typename T> inline std::vector<tw_emu::Acc> strided_acc(int space, uint64_t off,
        const DataCopyParams& p, uint64_t gap, bool w) {
    std::vector<tw_emu::Acc> out;
    const uint64_t len = p.blockLen * 32ull;
    for (uint32_t b = 0; b < p.blockCount; ++b) out.push_back({space, off + b * (len + gap * 32ull), len, w});
    return out;
}
inline double copy_cost(uint64_t bytes, double per_cycle) { return 16.0 + bytes / per_cycle; }

template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p, TW_LINE) {
    auto a = strided_acc<T>(tw_emu::SGM, src.addr(), p, p.srcStride, false);
    auto b = strided_acc<T>(dst.space, dst.off, p, p.dstStride, true);
    a.insert(a.end(), b.begin(), b.end());
    uint64_t bytes = uint64_t(p.blockCount) * p.blockLen * 32;
    tw_emu::issue(tw_emu::PMTE2, "DataCopy", line, a, [=] { strided(dst.data(), src.data(), p); },
                  copy_cost(bytes, 64), bytes);
}
template <typename T>
void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p, TW_LINE) {
    auto a = strided_acc<T>(src.space, src.off, p, p.srcStride, false);
    auto b = strided_acc<T>(tw_emu::SGM, dst.addr(), p, p.dstStride, true);
    a.insert(a.end(), b.begin(), b.end());
    uint64_t bytes = uint64_t(p.blockCount) * p.blockLen * 32;
    int mode = tw_emu::atomic_mode();
    tw_emu::issue(tw_emu::PMTE3, "DataCopy", line, a, [=] {
        const uint64_t per = 32 / sizeof(T), len = p.blockLen * per;
        for (uint32_t b = 0; b < p.blockCount; ++b)
            atomic_store(dst.data() + b * (len + p.dstStride * per), src.data() + b * (len + p.srcStride * per), len, mode);
    },
                  copy_cost(bytes, 64), bytes);
}
template <typename T>
void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p, TW_LINE) {
    auto a = strided_acc<T>(src.space, src.off, p, p.srcStride, false);
    auto b = strided_acc<T>(dst.space, dst.off, p, p.dstStride, true);
    a.insert(a.end(), b.begin(), b.end());
    uint64_t bytes = uint64_t(p.blockCount) * p.blockLen * 32;
    int pipe = src.space == tw_emu::SUB && dst.space == tw_emu::SUB ? tw_emu::PV : tw_emu::PMTE1;
    tw_emu::issue(pipe, "DataCopy", line, a, [=] { strided(dst.data(), src.data(), p); },
                  copy_cost(bytes, 128), bytes);
}
template <typename D, typename S> void DataCopy(const D& dst, const S& src, uint32_t count, TW_LINE) {
    using T = std::remove_pointer_t<decltype(dst.data())>;
    if (count * sizeof(T) % 32) tw_emu::error(line, "DataCopy of %u elements (%llu bytes) is not a multiple of 32 bytes", count, (unsigned long long)(count * sizeof(T)));
    DataCopy(dst, src, DataCopyParams(1, uint16_t(count * sizeof(T) / 32), 0, 0), line);
}

// -- cube ---------------------------------------------------------------------------------
template <typename T> constexpr uint64_t c0_of() { return 32 / sizeof(T); }

// GM (ND) -> L1 (NZ) on MTE2; only the elements the parameters name are written
template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Nd2NzParams& p, TW_LINE) {
    constexpr uint64_t C0 = c0_of<T>();
    if (dst.space != tw_emu::SL1) tw_emu::error(line, "DataCopy with Nd2NzParams writes L1 only");
    static const char* names[8] = {"ndNum", "nValue", "dValue", "srcNdMatrixStride", "srcDValue",
                                   "dstNzC0Stride", "dstNzNStride", "dstNzMatrixStride"};
    static const int64_t lo[8] = {0, 0, 0, 0, 1, 1, 1, 0};
    static const int64_t hi[8] = {4095, 16384, 65535, 65535, 65535, 16384, 16384, 16384};
    for (int i = 0; i < 8 && p.whole; ++i)
        if (p.given[i] < lo[i] || p.given[i] > hi[i]) {
            tw_emu::error(line, "DataCopy(Nd2NzParams): %s = %lld is outside [%lld, %lld]", names[i],
                          (long long)p.given[i], (long long)lo[i], (long long)hi[i]);
            return;
        }
    std::vector<tw_emu::Acc> a;
    uint64_t blocks = (p.dValue + C0 - 1) / C0;
    for (uint64_t m = 0; m < p.ndNum; ++m)
        for (uint64_t r = 0; r < p.nValue; ++r) {
            a.push_back({tw_emu::SGM, src.addr() + (m * p.srcNdMatrixStride + r * p.srcDValue) * sizeof(T),
                         p.dValue * sizeof(T), false});
            for (uint64_t b = 0; b < blocks; ++b) {
                uint64_t n = std::min<uint64_t>(C0, p.dValue - b * C0);
                a.push_back({dst.space, dst.off + (m * p.dstNzMatrixStride + (b * p.dstNzC0Stride + r * p.dstNzNStride) * C0) * sizeof(T),
                             n * sizeof(T), true});
            }
        }
    uint64_t bytes = uint64_t(p.ndNum) * p.nValue * p.dValue * sizeof(T);
    tw_emu::issue(tw_emu::PMTE2, "DataCopy(Nd2Nz)", line, a, [=] {
        T* d = dst.data(); const T* s = src.data();
        for (uint64_t m = 0; m < p.ndNum; ++m)
            for (uint64_t r = 0; r < p.nValue; ++r)
                for (uint64_t c = 0; c < p.dValue; ++c)
                    d[m * p.dstNzMatrixStride + ((c / C0) * p.dstNzC0Stride + r * p.dstNzNStride) * C0 + c % C0] =
                        s[m * p.srcNdMatrixStride + r * p.srcDValue + c];
    }, copy_cost(bytes, 64), bytes);
}
template <typename T>
void InitConstValue(const LocalTensor<T>& dst, const InitConstValueParams<T>& p, TW_LINE) {
    std::vector<tw_emu::Acc> a;
    const uint64_t per = 32 / sizeof(T);
    for (uint64_t r = 0; r < p.repeatTimes; ++r)
        a.push_back({dst.space, dst.off + r * (p.blockNum + p.dstGap) * 32ull, p.blockNum * 32ull, true});
    tw_emu::issue(tw_emu::PMTE2, "InitConstValue", line, a, [=] {
        for (uint64_t r = 0; r < p.repeatTimes; ++r)
            for (uint64_t i = 0; i < p.blockNum * per; ++i) dst.data()[r * (p.blockNum + p.dstGap) * per + i] = p.initValue;
    }, copy_cost(uint64_t(p.repeatTimes) * p.blockNum * 32, 128), uint64_t(p.repeatTimes) * p.blockNum * 32);
}
// L1 (NZ) -> L0A/L0B on MTE1, one 512-byte fractal per repeat
template <typename T>
void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParams& p, TW_LINE) {
    constexpr uint64_t F = 512 / sizeof(T), C0 = c0_of<T>();
    if (src.space != tw_emu::SL1 || (dst.space != tw_emu::SL0A && dst.space != tw_emu::SL0B))
        tw_emu::error(line, "LoadData2D moves L1 -> L0A/L0B");
    if (p.ifTranspose && sizeof(T) != 2)
        tw_emu::error(line, "LoadData2D transposes 16x16 fractals of 2-byte types only; a %zu-byte type "
                      "needs LoadDataWithTranspose", sizeof(T));
    std::vector<tw_emu::Acc> a;
    for (uint64_t i = 0; i < p.repeatTimes; ++i) {
        a.push_back({src.space, src.off + (p.startIndex + i * p.srcStride) * 512ull, 512, false});
        a.push_back({dst.space, dst.off + i * (1 + p.dstGap) * 512ull, 512, true});
    }
    tw_emu::issue(tw_emu::PMTE1, "LoadData", line, a, [=] {
        T* d = dst.data(); const T* s = src.data();
        for (uint64_t i = 0; i < p.repeatTimes; ++i) {
            const T* f = s + (p.startIndex + i * p.srcStride) * F;
            T* g = d + i * (1 + p.dstGap) * F;
            for (uint64_t r = 0; r < 16; ++r)
                for (uint64_t c = 0; c < C0; ++c) (p.ifTranspose ? g[c * 16 + r] : g[r * C0 + c]) = f[r * C0 + c];
        }
    }, copy_cost(p.repeatTimes * 512ull, 256), p.repeatTimes * 512ull);
}
// L1 -> L0A/L0B on MTE1 with the transpose of 16 x 16 squares (4-byte types here)
template <typename T>
void LoadDataWithTranspose(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                           const LoadData2dTransposeParams& p, TW_LINE) {
    constexpr uint64_t F = 512 / sizeof(T), C0 = c0_of<T>();
    if (src.space != tw_emu::SL1 || (dst.space != tw_emu::SL0A && dst.space != tw_emu::SL0B))
        tw_emu::error(line, "LoadDataWithTranspose moves L1 -> L0A/L0B");
    if (sizeof(T) != 4)
        tw_emu::error(line, "the emulator models LoadDataWithTranspose for 4-byte types only "
                      "(2-byte types use LoadData2D with ifTranspose)");
    std::vector<tw_emu::Acc> a;
    for (uint64_t i = 0; i < p.repeatTimes; ++i) {
        uint64_t first = i * (1 + p.dstGap);
        a.push_back({src.space, src.off + (p.startIndex + i * p.srcStride) * 1024ull, 1024, false});
        a.push_back({dst.space, dst.off + first * 512ull, 512, true});
        a.push_back({dst.space, dst.off + (first + 1 + p.dstFracGap) * 512ull, 512, true});
    }
    tw_emu::issue(tw_emu::PMTE1, "LoadDataWithTranspose", line, a, [=] {
        T* d = dst.data(); const T* s = src.data();
        for (uint64_t i = 0; i < p.repeatTimes; ++i) {
            const T* sq = s + (p.startIndex + i * p.srcStride) * 2 * F;  // [F0 | F1], 16 x 16
            uint64_t first = i * (1 + p.dstGap);
            T* out[2] = {d + first * F, d + (first + 1 + p.dstFracGap) * F};
            for (uint64_t r = 0; r < 16; ++r)          // square row r
                for (uint64_t c = 0; c < 16; ++c) {    // square column c
                    T v = sq[(c / C0) * F + r * C0 + c % C0];
                    // transposed: element (c, r); rows 0-7 of the square become fractal 0
                    out[r / C0][c * C0 + r % C0] = v;
                }
        }
    }, copy_cost(p.repeatTimes * 1024ull, 256), p.repeatTimes * 1024ull);
}
// C (L0C, NZ) = [C +] A (L0A, ZZ) @ B (L0B, ZN); whole fractals: m, n round up to 16, k to C0
template <typename C, typename A, typename B>
void Mmad(const LocalTensor<C>& c, const LocalTensor<A>& a, const LocalTensor<B>& b, const MmadParams& p, TW_LINE) {
    constexpr uint64_t C0 = c0_of<A>();
    if (a.space != tw_emu::SL0A || b.space != tw_emu::SL0B || c.space != tw_emu::SL0C)
        tw_emu::error(line, "Mmad takes L0A, L0B and writes L0C");
    // Mmad.md: L0C starts 1024-byte aligned, L0A and L0B 512-byte aligned; with m == 1 the
    // cube reads L0A as one ND row (GEMV) instead of ZZ fractals
    if (c.off % 1024 || a.off % 512 || b.off % 512)
        tw_emu::error(line, "Mmad operands must start aligned (L0C 1024 bytes, L0A/L0B 512 bytes); "
                      "got L0C %llu, L0A %llu, L0B %llu", (unsigned long long)c.off,
                      (unsigned long long)a.off, (unsigned long long)b.off);
    const bool gemv = p.m == 1;
    const uint64_t mb = (p.m + 15) / 16, nb = (p.n + 15) / 16, kb = (p.k + C0 - 1) / C0;
    const uint64_t M = mb * 16, N = nb * 16, K = kb * C0;
    std::vector<tw_emu::Acc> acc = {{a.space, a.off, M * K * sizeof(A), false},
                                    {b.space, b.off, K * N * sizeof(B), false}};
    if (!p.cmatrixInitVal) acc.push_back({c.space, c.off, M * N * sizeof(C), false});
    acc.push_back({c.space, c.off, M * N * sizeof(C), true});
    bool init = p.cmatrixInitVal;
    tw_emu::issue(tw_emu::PM, "Mmad", line, acc, [=] {
        C* cd = c.data(); const A* ad = a.data(); const B* bd = b.data();
        for (uint64_t i = 0; i < M; ++i)
            for (uint64_t j = 0; j < N; ++j) {
                // int8 operands accumulate exactly in int32 (L0C), the others in float
                using Sum = typename std::conditional<std::is_integral<C>::value, C, float>::type;
                C& out = cd[((j / 16) * mb + i / 16) * 256 + (i % 16) * 16 + j % 16];
                Sum s = init ? Sum(0) : Sum(out);
                for (uint64_t q = 0; q < K; ++q)
                    s += Sum(gemv ? (i == 0 ? ad[q] : A(0))
                                  : ad[((i / 16) * kb + q / C0) * 16 * C0 + (i % 16) * C0 + q % C0]) *
                         Sum(bd[((q / C0) * nb + j / 16) * 16 * C0 + (j % 16) * C0 + q % C0]);
                out = C(s);
            }
    }, 16.0 + double(M * N * K) / 4096.0, M * K * sizeof(A) + K * N * sizeof(B));
}
template <typename D, typename S>
constexpr QuantMode_t quant_needed() {
    return std::is_same<S, float>::value && std::is_same<D, half>::value ? QuantMode_t::F322F16
         : std::is_same<S, float>::value && std::is_same<D, bfloat16_t>::value ? QuantMode_t::F322BF16
         : QuantMode_t::NoQuant;
}
// L0C (NZ) -> GM (ND with CFG_ROW_MAJOR) on FIX, converting by quantPre
template <typename D, typename S, const FixpipeConfig& CFG = CFG_ROW_MAJOR>
void Fixpipe(const GlobalTensor<D>& dst, const LocalTensor<S>& src, const FixpipeParamsV220& p, TW_LINE) {
    if (!CFG.rowMajor) tw_emu::error(line, "Fixpipe to GM: only CFG_ROW_MAJOR (NZ -> ND) is modelled");
    if (p.quantPre != quant_needed<D, S>())
        tw_emu::error(line, "Fixpipe from %s to %s needs quantPre %d, got %d", tw_emu::type_name<S>(),
                      tw_emu::type_name<D>(), int(quant_needed<D, S>()), int(p.quantPre));
    if (p.srcStride % 16 || p.srcStride < p.mSize)
        tw_emu::error(line, "Fixpipe srcStride %u must be a multiple of 16 covering mSize %u",
                      p.srcStride, p.mSize);
    const uint64_t m = p.mSize, n = p.nSize, ss = p.srcStride, ds = p.dstStride;
    std::vector<tw_emu::Acc> a;
    for (uint64_t b = 0; b < (n + 15) / 16; ++b)
        a.push_back({src.space, src.off + b * ss * 16 * sizeof(S), m * 16 * sizeof(S), false});
    for (uint64_t r = 0; r < m; ++r) a.push_back({tw_emu::SGM, dst.addr() + r * ds * sizeof(D), n * sizeof(D), true});
    bool relu = p.reluEn;
    tw_emu::issue(tw_emu::PFIX, "Fixpipe", line, a, [=] {
        for (uint64_t r = 0; r < m; ++r)
            for (uint64_t c = 0; c < n; ++c) {
                float v = float(src.data()[(c / 16) * ss * 16 + r * 16 + c % 16]);
                dst.data()[r * ds + c] = D(relu && v < 0 ? 0.0f : v);
            }
    }, copy_cost(m * n * sizeof(D), 64), m * n * sizeof(D));
}

// L0C (NZ) -> UB (ND) on FIX of the cube core, into the UB of one or both vector sub-cores at
// the offset of ``dst`` (impl/basic_api/dav_3510/kernel_operator_fixpipe_impl.h,
// FixpipeL0cToUB: dual destination only without quantisation or ReLU, M even for the M split,
// N a multiple of 32 for the N split)
template <typename D, typename S, const FixpipeConfig& CFG = CFG_ROW_MAJOR>
void Fixpipe(const LocalTensor<D>& dst, const LocalTensor<S>& src,
             const FixpipeParamsArch3510<CO2Layout::ROW_MAJOR>& p, TW_LINE) {
    if (!tw_emu::is_aic() || dst.space != tw_emu::SUB || src.space != tw_emu::SL0C || !CFG.rowMajor)
        return tw_emu::error(line, "Fixpipe to UB: the cube core moves L0C to UB in CFG_ROW_MAJOR");
    const int mode = p.dualDstCtl;
    if (mode > 2 || (mode && (p.quantPre != QuantMode_t::NoQuant || p.reluEn)) ||
        (mode == 1 && p.mSize % 2) || (mode == 2 && p.nSize % 32) || !std::is_same<D, S>::value)
        return tw_emu::error(line, "Fixpipe to UB: dualDstCtl %d with mSize %u, nSize %u, "
                             "quantisation or ReLU is not a dual-destination copy", mode, p.mSize, p.nSize);
    if (p.srcStride % 16 || p.srcStride < p.mSize)
        return tw_emu::error(line, "Fixpipe srcStride %u must be a multiple of 16 covering mSize %u",
                             p.srcStride, p.mSize);
    const uint64_t m = p.mSize, n = p.nSize, ss = p.srcStride, ds = p.dstStride;
    const uint64_t hm = mode == 1 ? m / 2 : m, hn = mode == 2 ? n / 2 : n;  // each destination
    const int first = mode ? 1 : 1 + int(p.subBlockId), count = mode ? 2 : 1;
    std::vector<tw_emu::Acc> a;
    for (uint64_t b = 0; b < (n + 15) / 16; ++b)
        a.push_back({src.space, src.off + b * ss * 16 * sizeof(S), m * 16 * sizeof(S), false});
    for (int k = 0; k < count; ++k)
        for (uint64_t r = 0; r < hm; ++r)
            a.push_back({tw_emu::SUB, dst.off + r * ds * sizeof(D), hn * sizeof(D), true, first + k});
    tw_emu::issue(tw_emu::PFIX, "Fixpipe", line, a, [=] {
        for (int k = 0; k < count; ++k) {
            D* out = reinterpret_cast<D*>(tw_emu::core_space_base(first + k, tw_emu::SUB) + dst.off);
            for (uint64_t r = 0; r < hm; ++r)
                for (uint64_t c = 0; c < hn; ++c) {
                    uint64_t sr = mode == 1 ? k * hm + r : r, sc = mode == 2 ? k * hn + c : c;
                    out[r * ds + c] = D(src.data()[(sc / 16) * ss * 16 + sr * 16 + sc % 16]);
                }
        }
    }, copy_cost(m * n * sizeof(D), 64), m * n * sizeof(D));
}

// -- vector -------------------------------------------------------------------------------
// Element types each instruction computes on A2: the "数据类型" sections of the API documentation
// (docs/zh/api/SIMD-API/基础API/Memory矢量计算/基础算术/<name>.md, 数据填充/Duplicate.md,
// 归约计算/ReduceRepeat.md); a generated call with another type does not compile here either.
template <typename T> constexpr bool a2_arith() { return one_of<T, int16_t, half, int32_t, float>(); }
template <typename T> constexpr bool a2_float() { return one_of<T, half, float>(); }
template <typename T> inline double vec_cost(uint64_t count) { return 8.0 + count * sizeof(T) / 128.0; }
#define TW_BINARY(NAME, TYPES, EXPR)                                                          \
    template <typename T>                                                                     \
    void NAME(const LocalTensor<T>& d, const LocalTensor<T>& x, const LocalTensor<T>& y,      \
              int32_t count, TW_LINE) {                                                       \
        static_assert(TYPES<T>(), #NAME ": A2 does not compute on this element type (" #NAME ".md)"); \
        uint64_t nb = uint64_t(count) * sizeof(T);                                           \
        tw_emu::issue(tw_emu::PV, #NAME, line, {acc(x, nb, false), acc(y, nb, false), acc(d, nb, true)}, \
                      [=] { T* o = d.data(); const T* a = x.data(); const T* b = y.data();    \
                            for (int32_t i = 0; i < count; ++i) o[i] = T(EXPR); },            \
                      vec_cost<T>(count), nb);                                                \
    }
// Integer Add, Sub, Mul (and Adds, Muls) wrap modulo 2**bits, keeping the low bits of the exact
// result (tw_emu::arith): A2's pages (Add.md, Mul.md) say nothing of overflow, and A2's one
// saturation switch (特殊寄存器访问/SetCtrlSpr(ISASI).md, CTRL[48]; SetSaturationFlag(ISASI).md)
// covers half and bfloat16_t only; on 950, CTRL[53] (SetCtrlSpr(ISASI).md) chooses for integer
// vector arithmetic, by default 1'b0 "截断模式，溢出值按目标数据类型位数截断，保留低位，舍弃高位".
// Floating results are the exact result rounded once to T.
TW_BINARY(Add, a2_arith, tw_emu::arith<T>(a[i], b[i], std::plus<>()))
TW_BINARY(Sub, a2_arith, tw_emu::arith<T>(a[i], b[i], std::minus<>()))
TW_BINARY(Mul, a2_arith, tw_emu::arith<T>(a[i], b[i], std::multiplies<>()))
TW_BINARY(Div, a2_float, float(a[i]) / float(b[i]))
// Max and Min pick an operand: exact for every type (int32_t beyond 2^24 too)
TW_BINARY(Max, a2_arith, std::fmax(tw_emu::val(a[i]), tw_emu::val(b[i])))
TW_BINARY(Min, a2_arith, std::fmin(tw_emu::val(a[i]), tw_emu::val(b[i])))
#undef TW_BINARY
// the scalar operand has the tensor's element type (Adds.md: "scalarValue ... 数据类型需要与目的
// 操作数中的元素类型保持一致"); a value the scalar unit reads (GetValue) is lazy here
#define TW_SCALAR(NAME, EXPR)                                                                 \
    template <typename T, typename S>                                                         \
    void NAME##_impl(const LocalTensor<T>& d, const LocalTensor<T>& x, S s, int32_t count, int line) { \
        static_assert(a2_arith<T>(), #NAME ": A2 does not compute on this element type (" #NAME ".md)"); \
        uint64_t nb = uint64_t(count) * sizeof(T);                                           \
        tw_emu::issue(tw_emu::PV, #NAME, line, {acc(x, nb, false), acc(d, nb, true)},         \
                      [=] { T* o = d.data(); const T* a = x.data(); T b = tw_emu::convert<T>(tw_emu::now(s)); \
                            for (int32_t i = 0; i < count; ++i) o[i] = T(EXPR); },            \
                      vec_cost<T>(count), nb);                                                \
    }                                                                                         \
    template <typename T>                                                                     \
    void NAME(const LocalTensor<T>& d, const LocalTensor<T>& x, const T& s, int32_t count, TW_LINE) { \
        NAME##_impl(d, x, s, count, line);                                                    \
    }                                                                                         \
    template <typename T, typename L>                                                         \
    void NAME(const LocalTensor<T>& d, const LocalTensor<T>& x, const tw_emu::Lazy<L>& s, int32_t count, TW_LINE) { \
        NAME##_impl(d, x, s, count, line);                                                    \
    }
// b: the scalar operand (Maxs and Mins pick an operand: exact for int32_t beyond 2^24 too)
TW_SCALAR(Adds, tw_emu::arith<T>(a[i], b, std::plus<>()))
TW_SCALAR(Muls, tw_emu::arith<T>(a[i], b, std::multiplies<>()))
TW_SCALAR(Maxs, std::fmax(tw_emu::val(a[i]), tw_emu::val(b)))
TW_SCALAR(Mins, std::fmin(tw_emu::val(a[i]), tw_emu::val(b)))
#undef TW_SCALAR
template <typename T> constexpr bool a2_relu() { return one_of<T, half, int32_t, float>(); }
#define TW_UNARY(NAME, TYPES, EXPR)                                                           \
    template <typename T>                                                                     \
    void NAME(const LocalTensor<T>& d, const LocalTensor<T>& x, int32_t count, TW_LINE) {     \
        static_assert(TYPES<T>(), #NAME ": A2 does not compute on this element type (" #NAME ".md)"); \
        uint64_t nb = uint64_t(count) * sizeof(T);                                           \
        tw_emu::issue(tw_emu::PV, #NAME, line, {acc(x, nb, false), acc(d, nb, true)},         \
                      [=] { T* o = d.data(); const T* a = x.data();                           \
                            for (int32_t i = 0; i < count; ++i) { float v = float(a[i]); o[i] = T(EXPR); } }, \
                      vec_cost<T>(count), nb);                                                \
    }
TW_UNARY(Exp, a2_float, std::exp(v))
TW_UNARY(Ln, a2_float, std::log(v))
TW_UNARY(Abs, a2_float, std::fabs(v))
TW_UNARY(Sqrt, a2_float, std::sqrt(v))
TW_UNARY(Relu, a2_relu, v > 0 ? v : 0.0f)
TW_UNARY(Reciprocal, a2_float, 1.0f / v)
TW_UNARY(Rsqrt, a2_float, 1.0f / std::sqrt(v))
#undef TW_UNARY
// bitwise logic, count form (逻辑计算/And.md, Or.md, Not.md): int16_t and uint16_t on A2 (wider
// types through LocalTensor::ReinterpretCast, as the docs advise); the vector path joins Compare's
// bit masks with them
template <typename T> constexpr bool a2_logic() { return one_of<T, int16_t, uint16_t>(); }
#define TW_LOGIC(NAME, EXPR)                                                                  \
    template <typename T>                                                                     \
    void NAME(const LocalTensor<T>& d, const LocalTensor<T>& x, const LocalTensor<T>& y,      \
              int32_t count, TW_LINE) {                                                       \
        static_assert(a2_logic<T>(), #NAME ": A2 takes int16_t and uint16_t (" #NAME ".md)");   \
        uint64_t nb = uint64_t(count) * sizeof(T);                                           \
        tw_emu::issue(tw_emu::PV, #NAME, line, {acc(x, nb, false), acc(y, nb, false), acc(d, nb, true)}, \
                      [=] { T* o = d.data(); const T* a = x.data(); const T* b = y.data();    \
                            for (int32_t i = 0; i < count; ++i) o[i] = T(EXPR); },            \
                      vec_cost<T>(count), nb);                                                \
    }
TW_LOGIC(And, a[i] & b[i])
TW_LOGIC(Or, a[i] | b[i])
#undef TW_LOGIC
template <typename T>
void Not(const LocalTensor<T>& d, const LocalTensor<T>& x, int32_t count, TW_LINE) {
    static_assert(a2_logic<T>(), "Not: A2 takes int16_t and uint16_t (Not.md)");
    uint64_t nb = uint64_t(count) * sizeof(T);
    tw_emu::issue(tw_emu::PV, "Not", line, {acc(x, nb, false), acc(d, nb, true)},
                  [=] { T* o = d.data(); const T* a = x.data();
                        for (int32_t i = 0; i < count; ++i) o[i] = T(~a[i]); },
                  vec_cost<T>(count), nb);
}
template <typename T, typename S>
void duplicate_impl(const LocalTensor<T>& d, S value, int32_t count, int line) {
    static_assert(one_of<T, int16_t, uint16_t, half, bfloat16_t, int32_t, uint32_t, float>(),
                  "Duplicate: A2 does not fill this element type (Duplicate.md)");
    uint64_t nb = uint64_t(count) * sizeof(T);
    tw_emu::issue(tw_emu::PV, "Duplicate", line, {acc(d, nb, true)},
                  [=] { T v = tw_emu::convert<T>(tw_emu::now(value));
                        for (int32_t i = 0; i < count; ++i) d.data()[i] = v; }, vec_cost<T>(count), nb);
}
template <typename T> void Duplicate(const LocalTensor<T>& d, const T& value, int32_t count, TW_LINE) {
    duplicate_impl(d, value, count, line);
}
template <typename T, typename L> void Duplicate(const LocalTensor<T>& d, const tw_emu::Lazy<L>& value, int32_t count, TW_LINE) {
    duplicate_impl(d, value, count, line);
}

// -- Cast (类型转换/Cast.md): the (source, destination) pairs and rounding modes of A2 --------
inline const char* round_name(RoundMode m) {
    static const char* names[] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC", "CAST_ODD"};
    return names[int(m)];
}
template <typename T> constexpr const char* cname() {
    return std::is_same<T, float>::value ? "float" : std::is_same<T, half>::value ? "half"
         : std::is_same<T, bfloat16_t>::value ? "bfloat16_t" : std::is_same<T, int32_t>::value ? "int32_t"
         : std::is_same<T, int16_t>::value ? "int16_t" : std::is_same<T, int8_t>::value ? "int8_t"
         : std::is_same<T, uint8_t>::value ? "uint8_t" : std::is_same<T, int64_t>::value ? "int64_t" : "?";
}
inline bool cast_allowed(const char* src, const char* dst, RoundMode m) {
    struct Row { const char* s; const char* d; unsigned modes; };  // bit i: RoundMode i
    constexpr unsigned R = 0x3E, N = 0x01, O = 0x40;              // RINT..TRUNC, NONE, ODD
    static const Row rows[] = {
        {"int8_t", "half", N}, {"uint8_t", "half", N}, {"int16_t", "half", R | N}, {"int16_t", "float", N},
        {"half", "int8_t", R | N}, {"half", "uint8_t", R | N}, {"half", "int16_t", R}, {"half", "int32_t", R},
        {"half", "float", N}, {"bfloat16_t", "int32_t", R}, {"bfloat16_t", "float", N}, {"int32_t", "int16_t", N},
        {"int32_t", "float", R | N}, {"int32_t", "int64_t", N}, {"float", "int16_t", R}, {"float", "half", R | O | N},
        {"float", "bfloat16_t", R}, {"float", "int32_t", R}, {"float", "float", R}, {"float", "int64_t", R},
        {"int64_t", "int32_t", N}, {"int64_t", "float", R}};
    for (auto& r : rows)
        if (!std::strcmp(r.s, src) && !std::strcmp(r.d, dst)) return (r.modes >> int(m)) & 1;
    return false;
}
// rounding of a double to the floating type D (half, bfloat16_t, float) in mode m
template <typename D> D round_float(double x, RoundMode m) {
    D d = D(float(x));  // nearest even (float first: exact for the float sources A2 has)
    double dv = double(float(d));
    if (dv == x || m == RoundMode::CAST_NONE || m == RoundMode::CAST_RINT || std::isnan(x)) return d;
    auto step = [](D v, bool up) {  // the next representable value up or down
        if constexpr (std::is_same<D, float>::value) return std::nextafter(v, up ? INFINITY : -INFINITY);
        else {
            uint16_t b; std::memcpy(&b, &v, 2);
            bool neg = b & 0x8000;
            if ((b & 0x7FFF) == 0) b = up ? 0x0001 : 0x8001;
            else b = uint16_t((up != neg) ? b + 1 : b - 1);
            D r; std::memcpy(&r, &b, 2); return r;
        }
    };
    D lo = dv < x ? d : step(d, false), hi = dv > x ? d : step(d, true);
    double l = double(float(lo)), h = double(float(hi));
    switch (m) {
    case RoundMode::CAST_FLOOR: return lo;
    case RoundMode::CAST_CEIL: return hi;
    case RoundMode::CAST_TRUNC: return x > 0 ? lo : hi;
    case RoundMode::CAST_ROUND: return (x - l < h - x || (x - l == h - x && x < 0)) ? lo : hi;
    case RoundMode::CAST_ODD: {  // the neighbour whose last mantissa bit is 1
        uint32_t bits = 0; std::memcpy(&bits, &lo, sizeof(D));
        return (bits & 1) ? lo : hi;
    }
    default: return d;
    }
}
// x rounded to an integral value in mode m (NaN and infinities stay)
inline double round_integral(double x, RoundMode m) {
    return m == RoundMode::CAST_FLOOR ? std::floor(x) : m == RoundMode::CAST_CEIL ? std::ceil(x)
         : m == RoundMode::CAST_TRUNC ? std::trunc(x) : m == RoundMode::CAST_ROUND ? std::round(x)
         : std::nearbyint(x);
}
// A conversion to an integer type saturates: "当源值超出目标类型的表示范围时溢出，溢出默认按照
// 饱和模式处理" (数据结构/precision_conversion.md; its float -> int16_t example gives 2^15 - 1
// for 2^22 + 0.5 in every mode, int64_t -> int32_t 2^31 - 1 for 2^31; SaturationMode::CAST of
// 特殊寄存器访问/SetSaturationFlag(ISASI).md is the switch, on by default), infinities included;
// NaN gives 0 ("浮点转整型 ... NaN输入：返回0" in both modes, C-API/reg/data_type_convert/
// rounding_mode.md). A negative source of a conversion to uint8_t is an exception
// (precision_conversion.md, half -> uint8_t: "负数输入会被视为异常"), reported here.
template <typename D> D round_to(double x, RoundMode m) {
    if constexpr (std::is_integral<D>::value) {
        if (std::isnan(x)) return D(0);
        double r = round_integral(x, m);
        double lo = double(std::numeric_limits<D>::lowest()), hi = double(std::numeric_limits<D>::max());
        return r <= lo ? std::numeric_limits<D>::lowest() : r >= hi ? std::numeric_limits<D>::max() : D(r);
    } else {
        return round_float<D>(x, m);
    }
}
template <typename D, typename S>
void Cast(const LocalTensor<D>& d, const LocalTensor<S>& x, const RoundMode& mode, uint32_t count, TW_LINE) {
    if (!cast_allowed(cname<S>(), cname<D>(), mode))
        tw_emu::error(line, "Cast from %s to %s does not take %s on A2 (Cast.md)", cname<S>(), cname<D>(), round_name(mode));
    tw_emu::issue(tw_emu::PV, "Cast", line, {acc(x, uint64_t(count) * sizeof(S), false), acc(d, uint64_t(count) * sizeof(D), true)},
                  [=] { for (uint32_t i = 0; i < count; ++i) {
                            double v = tw_emu::val(x.data()[i]);
                            if constexpr (std::is_same<D, S>::value)  // to an integral value
                                d.data()[i] = D(float(round_integral(v, mode)));
                            else {
                                if (std::is_same<D, uint8_t>::value && v < 0) {
                                    tw_emu::error(line, "Cast of the negative %g to uint8_t: an exception on A2 "
                                                  "(precision_conversion.md)", v);
                                    return;
                                }
                                d.data()[i] = round_to<D>(v, mode);
                            }
                        } },
                  vec_cost<S>(count), uint64_t(count) * sizeof(S));
}

// -- compare and select (Memory矢量计算/比较与选择/Compare.md, Compares.md, Select.md; the A2
// implementation is impl/basic_api/dav_c220/kernel_operator_vec_cmp_impl.h and
// kernel_operator_vec_cmpsel_impl.h, the enums impl/basic_api/utils/kernel_utils_mode.h) -----
enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };
inline const char* cmp_name(CMPMODE m) {
    static const char* names[] = {"LT", "GT", "EQ", "LE", "GE", "NE"};
    return names[int(m)];
}
inline bool compares(double a, double b, CMPMODE m) {
    switch (m) {
    case CMPMODE::LT: return a < b;
    case CMPMODE::GT: return a > b;
    case CMPMODE::EQ: return a == b;
    case CMPMODE::LE: return a <= b;
    case CMPMODE::GE: return a >= b;
    default: return a != b;
    }
}
// the source types of Compare and Compares on A2 ("数据类型"): half and float in every mode,
// int32_t for CMPMODE::EQ only (CheckVcmpvDtype / CheckVcmpvsDtype)
template <typename T> constexpr bool a2_compare() { return one_of<T, half, float, int32_t>(); }
// The count form ("tensor前n个数据计算"): whole 256-byte repeats only ("需要保证count个元素所占空间
// 256字节对齐。未对齐部分元素不参与计算"; CompareCompute takes count * sizeof(T) / 256 repeats),
// reported here when count leaves a part. Bit i of dst (little-endian: bit 0 of byte 0 first)
// is the result of element i ("dst按照小端顺序排序成二进制结果"; GT of [2 3 5 7 11 13 17 19] and
// [2 4 6 8 10 12 14 16] is 240 = 0b11110000).
template <typename T, typename U, typename F>
void compare_impl(const char* what, const LocalTensor<U>& d, const LocalTensor<T>& x, std::vector<tw_emu::Acc> reads,
                  CMPMODE mode, uint32_t count, F other, int line) {
    static_assert(a2_compare<T>(), "Compare/Compares: A2 compares half, float and int32_t only (Compare.md)");
    if (std::is_same<T, int32_t>::value && mode != CMPMODE::EQ)
        return tw_emu::error(line, "%s of int32_t takes CMPMODE::EQ only on A2 (Compare.md), not %s", what, cmp_name(mode));
    if (uint64_t(count) * sizeof(T) % 256)
        return tw_emu::error(line, "%s of %u elements (%llu bytes): count must cover whole 256-byte repeats "
                             "(Compare.md: the elements of a partial repeat are not compared)", what, count,
                             (unsigned long long)(uint64_t(count) * sizeof(T)));
    reads.push_back(acc(d, count / 8, true));
    tw_emu::issue(tw_emu::PV, what, line, reads, [=] {
        uint8_t* o = reinterpret_cast<uint8_t*>(d.data());
        const T* a = x.data();
        for (uint32_t i = 0; i < count / 8; ++i) o[i] = 0;
        for (uint32_t i = 0; i < count; ++i)
            if (compares(tw_emu::val(a[i]), other(i), mode)) o[i / 8] |= uint8_t(1u << (i % 8));
    }, vec_cost<T>(count), uint64_t(count) * sizeof(T));
}
template <typename T, typename U>
void Compare(const LocalTensor<U>& d, const LocalTensor<T>& x, const LocalTensor<T>& y, CMPMODE mode, uint32_t count, TW_LINE) {
    static_assert(one_of<U, int8_t, uint8_t>(), "Compare: the result is int8_t or uint8_t (Compare.md)");
    uint64_t nb = uint64_t(count) * sizeof(T);
    compare_impl("Compare", d, x, {acc(x, nb, false), acc(y, nb, false)}, mode, count,
                 [y](uint32_t i) { return tw_emu::val(y.data()[i]); }, line);
}
template <typename T, typename U, typename S>
void compares_impl(const LocalTensor<U>& d, const LocalTensor<T>& x, S s, CMPMODE mode, uint32_t count, int line) {
    static_assert(std::is_same<U, uint8_t>::value, "Compares: the result is uint8_t on A2 (Compares.md)");
    compare_impl("Compares", d, x, {acc(x, uint64_t(count) * sizeof(T), false)}, mode, count,
                 [s](uint32_t) { return tw_emu::val(tw_emu::convert<T>(tw_emu::now(s))); }, line);
}
template <typename T, typename U>
void Compares(const LocalTensor<U>& d, const LocalTensor<T>& x, const T s, CMPMODE mode, uint32_t count, TW_LINE) {
    compares_impl(d, x, s, mode, count, line);
}
template <typename T, typename U, typename L>
void Compares(const LocalTensor<U>& d, const LocalTensor<T>& x, const tw_emu::Lazy<L>& s, CMPMODE mode, uint32_t count, TW_LINE) {
    compares_impl(d, x, s, mode, count, line);
}
// Select, count form (VselImpl of kernel_operator_vec_cmpsel_impl.h): half and float
// ("数据类型", A2), a selMask of uint8_t..uint64_t whose bit i (little-endian) picks src0 (1) or
// src1 (0) for element i. VSEL_CMPMASK_SPR reads the first 256 / sizeof(T) bits of selMask for
// every repeat ("多轮迭代均使用相同的selMask有效数值"); VSEL_TENSOR_SCALAR_MODE and
// VSEL_TENSOR_TENSOR_MODE consume selMask bit by bit. Those two write their scratch first: the
// scalar (mode 1: a Duplicate of ONE_BLK_SIZE = 32 elements of T) or selMask's address (mode 2:
// 32 uint32_t) at TMP_UB_OFFSET (184 KiB, impl/basic_api/utils/kernel_utils_constants.h for
// 2201), then PipeBarrier<PIPE_V>, set_cmpmask reads it, PipeBarrier<PIPE_V>, vsel (and mode 2
// one more PipeBarrier<PIPE_V>). Select.md: "对于模式1和模式2，使用时需要预留8KB的Unified Buffer
// 空间，作为接口的临时数据存放区" -- a tile there is overwritten (here: a race or a clobber).
constexpr uint64_t TMP_UB_OFFSET = 184 * 1024;
template <typename T, typename U, typename F>
void select_impl(const LocalTensor<T>& d, const LocalTensor<U>& sel, const LocalTensor<T>& x,
                 std::vector<tw_emu::Acc> reads, SELMODE mode, uint32_t count, F other, int line) {
    static_assert(a2_float<T>(), "Select: A2 selects half and float only (Select.md)");
    static_assert(one_of<U, uint8_t, uint16_t, uint32_t, uint64_t>(), "Select: selMask is uint8_t..uint64_t (Select.md)");
    const uint64_t per = 256 / sizeof(T), nb = uint64_t(count) * sizeof(T);
    if (mode != SELMODE::VSEL_CMPMASK_SPR) {
        const uint64_t scratch = mode == SELMODE::VSEL_TENSOR_SCALAR_MODE ? 32 * sizeof(T) : 32 * sizeof(uint32_t);
        tw_emu::issue(tw_emu::PV, "Select (scratch at TMP_UB_OFFSET)", line,
                      {tw_emu::Acc{tw_emu::SUB, TMP_UB_OFFSET, scratch, true}},
                      [] {}, vec_cost<T>(32), scratch);
        tw_emu::issue_pipe_barrier(tw_emu::PV, line);
        tw_emu::issue(tw_emu::PV, "Select (set_cmpmask)", line, {tw_emu::Acc{tw_emu::SUB, TMP_UB_OFFSET, scratch, false}},
                      [] {}, 8.0, scratch);
        tw_emu::issue_pipe_barrier(tw_emu::PV, line);
    }
    const uint64_t bits = mode == SELMODE::VSEL_CMPMASK_SPR ? std::min<uint64_t>(count, per) : count;
    reads.push_back(acc(sel, (bits + 7) / 8, false));
    reads.push_back(acc(x, nb, false));
    reads.push_back(acc(d, nb, true));
    tw_emu::issue(tw_emu::PV, "Select", line, reads, [=] {
        const uint8_t* m = reinterpret_cast<const uint8_t*>(sel.data());
        const T* a = x.data();
        std::vector<T> out(count);
        for (uint32_t i = 0; i < count; ++i) {
            uint64_t b = mode == SELMODE::VSEL_CMPMASK_SPR ? i % per : i;
            out[i] = (m[b / 8] >> (b % 8)) & 1 ? a[i] : T(other(i));
        }
        std::copy(out.begin(), out.end(), d.data());
    }, vec_cost<T>(count), nb);
    if (mode == SELMODE::VSEL_TENSOR_TENSOR_MODE) tw_emu::issue_pipe_barrier(tw_emu::PV, line);
}
template <typename T, typename U>
void Select(const LocalTensor<T>& d, const LocalTensor<U>& sel, const LocalTensor<T>& x, const LocalTensor<T>& y,
            SELMODE mode, uint32_t count, TW_LINE) {
    if (mode == SELMODE::VSEL_TENSOR_SCALAR_MODE)
        return tw_emu::error(line, "Select with two tensors takes VSEL_CMPMASK_SPR or VSEL_TENSOR_TENSOR_MODE (Select.md)");
    select_impl(d, sel, x, {acc(y, uint64_t(count) * sizeof(T), false)}, mode, count,
                [y](uint32_t i) { return y.data()[i]; }, line);
}
template <typename T, typename U, typename S>
void select_scalar(const LocalTensor<T>& d, const LocalTensor<U>& sel, const LocalTensor<T>& x, S s, SELMODE mode,
                   uint32_t count, int line) {
    if (mode != SELMODE::VSEL_TENSOR_SCALAR_MODE)
        return tw_emu::error(line, "Select with a scalar takes VSEL_TENSOR_SCALAR_MODE (Select.md)");
    select_impl(d, sel, x, {}, mode, count, [s](uint32_t) { return tw_emu::convert<T>(tw_emu::now(s)); }, line);
}
template <typename T, typename U>
void Select(const LocalTensor<T>& d, const LocalTensor<U>& sel, const LocalTensor<T>& x, T s, SELMODE mode,
            uint32_t count, TW_LINE) {
    select_scalar(d, sel, x, s, mode, count, line);
}
template <typename T, typename U, typename L>
void Select(const LocalTensor<T>& d, const LocalTensor<U>& sel, const LocalTensor<T>& x, const tw_emu::Lazy<L>& s,
            SELMODE mode, uint32_t count, TW_LINE) {
    select_scalar(d, sel, x, s, mode, count, line);
}

// -- reductions along repeats (ReduceRepeat.md; WholeReduceSum/Max/Min are its older names) ---
enum class ReduceOrder { ORDER_VALUE_INDEX, ORDER_INDEX_VALUE, ORDER_ONLY_VALUE, ORDER_ONLY_INDEX };
template <typename T, typename F>
void whole_reduce(const char* what, const LocalTensor<T>& d, const LocalTensor<T>& s, int32_t mask, int32_t repeat,
                  int32_t dstRepStride, int32_t srcBlkStride, int32_t srcRepStride, F combine, int line) {
    static_assert(a2_float<T>(), "WholeReduce: A2 reduces half and float only (ReduceRepeat.md)");
    if (repeat < 0 || repeat > 255) {
        tw_emu::error(line, "%s: repeatTime %d is outside [0, 255] (ReduceRepeat.md; the hardware field is 8 bits)", what, repeat);
        return;
    }
    if (srcBlkStride != 1 || mask < 1 || mask * sizeof(T) > 256)
        tw_emu::error(line, "%s: the emulator models srcBlkStride 1 and masks of 1-%d elements", what, int(256 / sizeof(T)));
    std::vector<tw_emu::Acc> a;
    const uint64_t rep = uint64_t(srcRepStride) * 32;
    for (int32_t r = 0; r < repeat; ++r) a.push_back({s.space, s.off + r * rep, uint64_t(mask) * sizeof(T), false});
    for (int32_t r = 0; r < repeat; ++r) a.push_back({d.space, d.off + uint64_t(r) * dstRepStride * sizeof(T), sizeof(T), true});
    tw_emu::issue(tw_emu::PV, what, line, a, [=] {
        for (int32_t r = 0; r < repeat; ++r) {
            const T* x = reinterpret_cast<const T*>(s.base + s.off + r * rep);
            float acc = float(x[0]);
            for (int32_t i = 1; i < mask; ++i) acc = combine(acc, float(x[i]));
            d.data()[uint64_t(r) * dstRepStride] = T(acc);
        }
    }, vec_cost<T>(uint64_t(repeat) * mask), uint64_t(repeat) * mask * sizeof(T));
}
template <typename T>
void WholeReduceSum(const LocalTensor<T>& d, const LocalTensor<T>& s, int32_t mask, int32_t repeat, int32_t dstRepStride,
                    int32_t srcBlkStride, int32_t srcRepStride, TW_LINE) {
    whole_reduce("WholeReduceSum", d, s, mask, repeat, dstRepStride, srcBlkStride, srcRepStride, [](float a, float b) { return a + b; }, line);
}
#define TW_WHOLE(NAME, EXPR)                                                                   \
    template <typename T>                                                                      \
    void NAME(const LocalTensor<T>& d, const LocalTensor<T>& s, int32_t mask, int32_t repeat, int32_t dstRepStride, \
              int32_t srcBlkStride, int32_t srcRepStride, ReduceOrder order = ReduceOrder::ORDER_VALUE_INDEX, TW_LINE) { \
        if (order != ReduceOrder::ORDER_ONLY_VALUE)                                            \
            tw_emu::error(line, #NAME ": the emulator models ReduceOrder::ORDER_ONLY_VALUE only"); \
        whole_reduce(#NAME, d, s, mask, repeat, dstRepStride, srcBlkStride, srcRepStride, [](float a, float b) { return EXPR; }, line); \
    }
TW_WHOLE(WholeReduceMax, std::fmax(a, b))
TW_WHOLE(WholeReduceMin, std::fmin(a, b))
#undef TW_WHOLE

// -- DataCopyPad: byte-exact rows, UB rows padded to 32 bytes --------------------------------
struct DataCopyExtParams {
    uint16_t blockCount = 1;
    uint32_t blockLen = 0, srcStride = 0, dstStride = 0, rsv = 0;  // blockLen in bytes
    DataCopyExtParams() = default;
    DataCopyExtParams(uint16_t c, uint32_t l, uint32_t s, uint32_t d, uint32_t r = 0)
        : blockCount(c), blockLen(l), srcStride(s), dstStride(d), rsv(r) {}
};
template <typename T> struct DataCopyPadExtParams {
    bool isPad = false;
    uint8_t leftPadding = 0, rightPadding = 0;
    T paddingValue{};
    DataCopyPadExtParams() = default;
    DataCopyPadExtParams(bool p, uint8_t l, uint8_t r, T v) : isPad(p), leftPadding(l), rightPadding(r), paddingValue(v) {}
};
inline uint64_t ceil32(uint64_t n) { return (n + 31) / 32 * 32; }
// GM -> UB (DataCopyPad（GMToUB非对齐数据搬运）.md): srcStride is the byte gap between GM rows,
// dstStride the 32-byte-block gap between UB rows. Each UB row is leftPadding elements, the
// blockLen bytes, rightPadding elements, then "dummy" elements up to the next 32-byte boundary.
// The padding and the dummy are paddingValue when isPad is set; otherwise, with no left or right
// padding the dummy repeats the row's first element, and with padding everything padded is
// undefined (here: NaN bytes, so a kernel that reads it shows it).
template <typename T>
void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                 const DataCopyPadExtParams<T>& pad, TW_LINE) {
    std::vector<tw_emu::Acc> a;
    const uint64_t len = p.blockLen, left = uint64_t(pad.leftPadding) * sizeof(T),
                   right = uint64_t(pad.rightPadding) * sizeof(T);
    if (left > 32 || right > 32) tw_emu::error(line, "DataCopyPad: leftPadding and rightPadding cover at most 32 bytes");
    const uint64_t row = ceil32(left + len + right);
    const uint64_t srow = len + p.srcStride, drow = row + uint64_t(p.dstStride) * 32;
    for (uint32_t b = 0; b < p.blockCount; ++b) {
        a.push_back({tw_emu::SGM, src.addr() + b * srow, len, false});
        a.push_back({dst.space, dst.off + b * drow, row, true});
    }
    tw_emu::issue(tw_emu::PMTE2, "DataCopyPad", line, a, [=] {
        for (uint32_t b = 0; b < p.blockCount; ++b) {
            uint8_t* d = dst.base + dst.off + b * drow;
            const uint8_t* s = reinterpret_cast<const uint8_t*>(src.data()) + b * srow;
            std::memcpy(d + left, s, len);
            T* e = reinterpret_cast<T*>(d);
            const uint64_t first = left / sizeof(T), end = (left + len) / sizeof(T), all = row / sizeof(T);
            for (uint64_t i = 0; i < all; ++i) {
                if (i >= first && i < end) continue;
                if (pad.isPad) e[i] = pad.paddingValue;
                else if (left == 0 && right == 0) e[i] = e[first];  // the dummy repeats the first element
                else std::memset(e + i, 0xFF, sizeof(T));
            }
        }
    }, copy_cost(p.blockCount * len, 64), p.blockCount * len);
}
// UB -> GM: srcStride is the 32-byte-block gap in UB, dstStride the byte gap between GM rows
template <typename T>
void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p, TW_LINE) {
    std::vector<tw_emu::Acc> a;
    const uint64_t len = p.blockLen, srow = ceil32(len) + uint64_t(p.srcStride) * 32, drow = len + p.dstStride;
    for (uint32_t b = 0; b < p.blockCount; ++b) {
        a.push_back({src.space, src.off + b * srow, len, false});
        a.push_back({tw_emu::SGM, dst.addr() + b * drow, len, true});
    }
    int mode = tw_emu::atomic_mode();
    if (len % sizeof(T)) tw_emu::error(line, "DataCopyPad of %u bytes is not a whole number of elements", p.blockLen);
    tw_emu::issue(tw_emu::PMTE3, "DataCopyPad", line, a, [=] {
        for (uint32_t b = 0; b < p.blockCount; ++b)
            atomic_store(reinterpret_cast<T*>(reinterpret_cast<uint8_t*>(dst.data()) + b * drow),
                         reinterpret_cast<const T*>(src.base + src.off + b * srow), len / sizeof(T), mode);
    }, copy_cost(p.blockCount * len, 64), p.blockCount * len);
}

// -- synchronisation ------------------------------------------------------------------------
template <HardEvent E> void SetFlag(int32_t id, TW_LINE) { tw_emu::issue_set(int(E) / 8, int(E) % 8, id, line); }
template <HardEvent E> void WaitFlag(int32_t id, TW_LINE) { tw_emu::issue_wait(int(E) / 8, int(E) % 8, id, line); }
// PipeBarrier(ISASI).md: PipeBarrier<P> makes every earlier instruction of pipe P finish its
// reads and writes before a later one of P starts; PIPE_ALL waits for every pipe. Two
// instructions of one pipe that touch the same bytes (at least one writing) need it between
// them on the vector pipe (the Add -> Mul example) and on MTE1/MTE2/MTE3/FIX ("在搬运地址有重叠
// 的情况下需要开发者插入同步"); PIPE_S is refused.
template <pipe_t P> void PipeBarrier(TW_LINE) {
    if (P == PIPE_ALL) tw_emu::issue_barrier_all(line);
    else if (P == PIPE_S) tw_emu::error(line, "PipeBarrier<PIPE_S> is a hardware error");
    else tw_emu::issue_pipe_barrier(P, line);
}
// CreateVecIndex, count form (数据填充/CreateVecIndex.md; declared __in_pipe__(S)
// __out_pipe__(V) in include/basic_api/kernel_operator_vec_createvecindex_intf.h): what
// CreateVecIndexCalc of impl/basic_api/dav_c220/kernel_operator_vec_createvecindex_impl.h does.
// The first 32-byte block is written with SetValue on the scalar unit (firstValue + i, in float
// for floating types: GetCreateVecIndexValue), then SetFlag/WaitFlag<S_V> on the id
// GetTPipePtr()->FetchEventID(S_V) gives (the first id not allocated from TPipe's pool: 0, as
// generated code allocates none), then each further block of the first repeat is the one before
// plus the block's element count, and each further repeat the one before plus the repeat's, by
// Adds on V with a PipeBarrier<PIPE_V> after each but the last (Adds with mask m, repeatTime 1
// and default strides is the count form of m elements). Nothing orders the SetValue after
// earlier vector work on dst: the caller must (a V_S flag).
template <typename T> void CreateVecIndex(LocalTensor<T> dst, const T& firstValue, uint32_t count, TW_LINE) {
    static_assert(one_of<T, half, int16_t, float, int32_t>(),
                  "CreateVecIndex: A2 takes half, int16_t, float and int32_t (CreateVecIndex.md)");
    constexpr int32_t blk = 32 / sizeof(T), rep = 256 / sizeof(T);
    auto value = [&](int32_t i) {
        if constexpr (std::is_integral<T>::value) return T(int64_t(firstValue) + int64_t(i));
        else return T(float(firstValue) + float(i));
    };
    auto one_block = [&](uint32_t n) {
        for (int32_t i = 0; i < int32_t(n); ++i) dst.SetValue(i, value(i), line);
        SetFlag<HardEvent::S_V>(0, line);
        WaitFlag<HardEvent::S_V>(0, line);
    };
    if (count <= uint32_t(blk)) { one_block(count); return; }
    one_block(blk);
    int32_t loops = count >= uint32_t(rep) ? 8 - 1 : int32_t(count) / blk - 1;
    int32_t tail = count >= uint32_t(rep) ? 0 : int32_t(count) % blk;
    for (int32_t i = 0; i < loops; ++i) {
        Adds(dst[(i + 1) * blk], dst[i * blk], T(blk), blk, line);
        PipeBarrier<PIPE_V>(line);
    }
    int32_t at = int32_t(count) / blk * blk;
    if (tail > 0) {
        Adds(dst[at], dst[at - blk], T(blk), tail, line);
        PipeBarrier<PIPE_V>(line);
    }
    if (count <= uint32_t(rep)) return;
    loops = int32_t(count) / rep - 1;
    tail = int32_t(count) % rep;
    for (int32_t i = 0; i < loops; ++i) {
        Adds(dst[(i + 1) * rep], dst[i * rep], T(rep), rep, line);
        PipeBarrier<PIPE_V>(line);
    }
    at = int32_t(count) / rep * rep;
    if (tail > 0) Adds(dst[at], dst[at - rep], T(rep), tail, line);
}
template <int MODE, pipe_t P> void CrossCoreSetFlag(int32_t id, TW_LINE) { tw_emu::issue_cross_set(P, id, MODE, line); }
inline void CrossCoreWaitFlag(int32_t id, TW_LINE) { tw_emu::issue_cross_wait(id, line); }

// -- debugging ------------------------------------------------------------------------------
// printf (include/utils/debug/asc_printf.h) as the kit implements it: set_scalar_param_impl
// (impl/utils/debug/npu_arch_2201/ and npu_arch_3510/asc_aicore_printf_utils.h) stores each
// scalar argument in a 64-bit slot, "if constexpr (std::is_signed<T>::value) *((__gm__
// int64_t*)scalarAddr) = static_cast<int64_t>(scalar); ... std::is_unsigned<T> ... uint64_t",
// half/float/bfloat16_t as a float (2201: "printf unsupport double type"); the host formats
// the slots with the conversions the kit documents (docs/zh/api/SIMD-API/基础API/调试接口/
// 异常检测/assert.md, fmt: "%d / %i ... bool、int8_t、int16_t、int32_t、int64_t", "%u ...
// bool、uint8_t、uint16_t、uint32_t、uint64_t", "%x ... NPU域上的输出为64位", %f float/half, %s,
// %p). A lazy argument (a GetValue) stalls the scalar unit until its read is done (settle).
}  // namespace AscendC

namespace tw_emu {
struct PrintSlot { char kind; uint64_t bits; const char* text; };  // kind: i u f s p
template <typename A> PrintSlot print_slot(const A& a) {
    if constexpr (is_lazy<A>) {
        settle(a.line);
        return print_slot(now(a));
    } else if constexpr (std::is_same<A, half>::value || std::is_same<A, float>::value ||
                         std::is_same<A, bfloat16_t>::value) {
        float f = float(a);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        return {'f', u, nullptr};
    } else if constexpr (std::is_same<std::decay_t<A>, const char*>::value || std::is_same<std::decay_t<A>, char*>::value) {
        return {'s', 0, a};
    } else if constexpr (std::is_pointer<A>::value) {
        return {'p', uint64_t(uintptr_t(a)), nullptr};
    } else if constexpr (std::is_signed<A>::value) {
        return {'i', uint64_t(int64_t(a)), nullptr};
    } else {
        static_assert(std::is_unsigned<A>::value || std::is_enum<A>::value, "printf takes scalars, strings and pointers");
        return {'u', uint64_t(a), nullptr};
    }
}
// the text ``fmt`` prints with ``slots``: each conversion (flags, width and precision kept, a
// length modifier ignored) reads the next slot as its type reads it
std::string format_slots(const char* fmt, const std::vector<PrintSlot>& slots);
}  // namespace tw_emu

namespace AscendC {
template <typename... Args> void printf(const char* fmt, Args... args) {
    static_assert(!(std::is_same<Args, double>::value || ...), "printf unsupport double type (2201)");
    std::vector<tw_emu::PrintSlot> slots{tw_emu::print_slot(args)...};
    std::fputs(tw_emu::format_slots(fmt, slots).c_str(), stdout);
    std::fflush(stdout);
}
}  // namespace AscendC

namespace tw_emu {
// one element of a DumpTensor, whose element types are bool, the 8- to 64-bit integers, half,
// bfloat16_t and float ("数据类型" of DumpTensor.md): an integer exactly, in decimal (a float
// holds no uint32 or int64 past 2**24 exactly), a floating value as %f (the document's
// examples: "19.000000", "0.113037")
template <typename T> std::string dump_element(const T& v) {
    char buf[64];
    if constexpr (std::is_integral<T>::value && std::is_signed<T>::value)
        std::snprintf(buf, sizeof buf, "%lld", (long long)v);
    else if constexpr (std::is_integral<T>::value)
        std::snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    else
        std::snprintf(buf, sizeof buf, "%f", double(float(v)));
    return buf;
}
// The lines DumpTensor.md shows after the header. Without a shape: "[a, b, ...]". With a
// ShapeInfo: nested brackets, one innermost row a line ("[[a,b],\n[c,d]]"); a shape of fewer
// elements than dump_size prints the shape's ("shape is [7, 8], dumpSize is 64, dumpSize is
// greater than shapeSize."), one of more pads with "-" ("... data is not enough.").
template <typename T> std::string dump_values(const T* data, uint32_t size, uint32_t dims,
                                              const uint32_t* shape) {
    std::string out;
    if (dims == 0) {
        out = "[";
        for (uint32_t i = 0; i < size; ++i) out += dump_element(data[i]) + (i + 1 < size ? ", " : "");
        return out + "]\n";
    }
    uint64_t total = 1;
    std::string dims_text;
    for (uint32_t d = 0; d < dims; ++d) {
        total *= shape[d];
        dims_text += std::to_string(shape[d]) + (d + 1 < dims ? ", " : "");
    }
    if (total != size)
        out += "shape is [" + dims_text + "], dumpSize is " + std::to_string(size) +
               (total < size ? ", dumpSize is greater than shapeSize.\n" : ", data is not enough.\n");
    uint64_t next = 0;
    std::function<std::string(uint32_t)> level = [&](uint32_t d) {
        std::string text = "[";
        for (uint32_t i = 0; i < shape[d]; ++i) {
            if (d + 1 == dims) {
                text += next < size ? dump_element(data[next]) : std::string("-");
                ++next;
            } else {
                text += level(d + 1);
            }
            if (i + 1 < shape[d]) text += d + 1 == dims ? "," : ",\n";
        }
        return text + "]";
    };
    return out + level(0) + "\n";
}
}  // namespace tw_emu

namespace AscendC {
// DumpTensor on 2201 (impl/utils/debug/asc_aicore_dump_impl.h, npu_arch_2201/
// asc_aicore_dump_utils.h): PipeBarrier<PIPE_ALL>, a copy to the dump area in GM (UB and L1:
// copy_ubuf_to_gm / copy_cbuf_to_gm on MTE3, L0C: copy_matrix_cc_to_gm on FIX; L0A/L0B are not
// dumped), PipeBarrier<PIPE_ALL>
template <typename T> void DumpTensor(const LocalTensor<T>& t, uint32_t desc, uint32_t size,
                                      const ShapeInfo& shape, TW_LINE) {
    if (t.space == tw_emu::SL0A || t.space == tw_emu::SL0B) {
        tw_emu::error(line, "DumpTensor of %s is not supported on 2201 (asc_aicore_dump_utils.h)", tw_emu::space_name(t.space));
        return;
    }
    tw_emu::issue_barrier_all(line);
    tw_emu::issue(t.space == tw_emu::SL0C ? tw_emu::PFIX : tw_emu::PMTE3, "DumpTensor", line,
                  {acc(t, uint64_t(size) * sizeof(T), false)}, [=] {
        std::printf("DumpTensor: desc=%u, addr=%llu, data_type=%s, position=%s, dump_size=%u\n", desc,
                    (unsigned long long)t.off, tw_emu::type_name<T>(), tw_emu::space_name(t.space), size);
        std::fputs(tw_emu::dump_values(t.data(), size, shape.dims, shape.shape).c_str(), stdout);
        std::fflush(stdout);
    }, copy_cost(uint64_t(size) * sizeof(T), 64), uint64_t(size) * sizeof(T));
    tw_emu::issue_barrier_all(line);
}
template <typename T> void DumpTensor(const LocalTensor<T>& t, uint32_t desc, uint32_t size, TW_LINE) {
    DumpTensor(t, desc, size, ShapeInfo(), line);
}
template <typename T> void DumpTensor(const GlobalTensor<T>& t, uint32_t desc, uint32_t size,
                                      const ShapeInfo& shape, TW_LINE) {
    tw_emu::issue_barrier_all(line);  // then a scalar copy (mem_copy_gm_to_gm)
    tw_emu::issue(tw_emu::PS, "DumpTensor", line, {acc(t, uint64_t(size) * sizeof(T), false)}, [=] {
        std::printf("DumpTensor: desc=%u, addr=%p, data_type=%s, position=GM, dump_size=%u\n", desc,
                    (void*)t.ptr, tw_emu::type_name<T>(), size);
        std::fputs(tw_emu::dump_values(t.ptr, size, shape.dims, shape.shape).c_str(), stdout);
        std::fflush(stdout);
    }, 1.0, 0);
    tw_emu::issue_barrier_all(line);
}
template <typename T> void DumpTensor(const GlobalTensor<T>& t, uint32_t desc, uint32_t size, TW_LINE) {
    DumpTensor(t, desc, size, ShapeInfo(), line);
}

// -- the arch-3510 register API (T.SimdVF), namespace AscendC::Reg ------------------------------
// A vector function (__simd_vf__) runs when asc_vf_call reaches it; each of its instructions is
// queued on V like the others, so they run in order after the flags before the call. Registers
// and masks hold their 256 bytes (VECTOR_REG_WIDTH) behind a shared pointer: a queued instruction
// reads and writes the register's bytes when it runs. Masks keep one predicate byte per register
// byte; a lane of T is active when the byte of its first byte is (pset_b8/b16/b32). Inactive
// lanes of a result are zero (MaskMergeMode::ZEROING, the API's default).
#define __ubuf__
#define __simd_vf__
#define __simd_callee__
enum class ReduceType { SUM, MAX, MIN };  // impl/utils/common_types.h
namespace Reg {
constexpr uint64_t VL = 256;
constexpr double REG_COST = 2.0;
struct Bytes { alignas(32) uint8_t b[VL] = {0}; };
// include/basic_api/reg_compute/kernel_reg_compute_utils.h
enum class MaskPattern { ALL, ALLF = 15 };
enum class LoadDist { DIST_NORM, DIST_UNPACK_B16 };
enum class StoreDist { DIST_NORM, DIST_PACK_B32 };
enum class MemType { VEC_STORE, VEC_LOAD, SCALAR_STORE, SCALAR_LOAD, VEC_ALL, SCALAR_ALL };
enum class RegLayout { UNKNOWN = -1, ZERO, ONE };
enum class SatMode { UNKNOWN = -1, NO_SAT, SAT };
enum class MaskMergeMode { UNKNOWN, MERGING, ZEROING };
struct CastTrait { RegLayout layoutMode; SatMode satMode; MaskMergeMode mrgMode; RoundMode roundMode; };
// include/basic_api/reg_compute/kernel_reg_compute_struct_intf.h
template <typename T> struct RegTensor {
    using Elem = T;
    static constexpr int N = int(VL / sizeof(T));
    std::shared_ptr<Bytes> v = std::make_shared<Bytes>();
    T lane(int i) const { T t; std::memcpy(&t, v->b + i * sizeof(T), sizeof(T)); return t; }
};
struct MaskReg {
    std::shared_ptr<Bytes> p = std::make_shared<Bytes>();
    bool on(uint64_t byte) const { return p->b[byte] != 0; }
};
inline uint64_t ub_offset(const void* p) { return uint64_t((const uint8_t*)p - tw_emu::space_base(tw_emu::SUB)); }
// lane i of d = f(i) where the mask holds lane i's first byte of ``width``-byte source lanes at
// ``at(i)``; computed into a copy first (d may be a source)
template <typename T, typename F, typename A>
void lanewise(const char* what, int line, RegTensor<T>& d, const MaskReg& m, A at, F f) {
    auto dv = d.v;
    auto mp = m.p;
    tw_emu::issue(tw_emu::PV, what, line, {}, [=] {
        Bytes out;
        for (int i = 0; i < RegTensor<T>::N; ++i) {
            T x = mp->b[at(i)] ? T(f(i)) : T(0);
            std::memcpy(out.b + i * sizeof(T), &x, sizeof(T));
        }
        *dv = out;
    }, REG_COST, VL);
}
template <typename T> inline auto own_lane() { return [](int i) { return uint64_t(i) * sizeof(T); }; }

// kernel_reg_compute_maskreg_intf.h: CreateMask (pset), every lane of T or none
template <typename T, MaskPattern pattern = MaskPattern::ALL> MaskReg CreateMask(TW_LINE) {
    MaskReg m;
    auto mp = m.p;
    tw_emu::issue(tw_emu::PV, "CreateMask", line, {}, [=] {
        std::memset(mp->b, pattern == MaskPattern::ALL ? 1 : 0, VL);
    }, REG_COST, 0);
    return m;
}
// UpdateMask (plt_b8/b16/b32 of dav_3510/kernel_reg_compute_maskreg_impl.h): lane i of T active
// where i < n; n becomes n - lanes, or 0 where n < lanes (POST_UPDATE)
template <typename T> MaskReg UpdateMask(uint32_t& n, TW_LINE) {
    constexpr uint32_t lanes = uint32_t(VL / sizeof(T));
    const uint64_t bytes = uint64_t(n < lanes ? n : lanes) * sizeof(T);
    n = n < lanes ? 0 : n - lanes;
    MaskReg m;
    auto mp = m.p;
    tw_emu::issue(tw_emu::PV, "UpdateMask", line, {}, [=] {
        std::memset(mp->b, 0, VL);
        std::memset(mp->b, 1, bytes);
    }, REG_COST, 0);
    return m;
}
// kernel_reg_compute_membar_intf.h: LocalMemBar orders the function's earlier UB accesses of
// kind src before its later ones of kind dst (mem_bar VST_VLD, VLD_VST, VST_VST ...); the
// emulator orders every V access across it, as PipeBarrier<PIPE_V> (the codegen picks the pair)
template <MemType src, MemType dst> void LocalMemBar(TW_LINE) { tw_emu::issue_pipe_barrier(tw_emu::PV, line); }

// kernel_reg_compute_datacopy_intf.h: LoadAlign (vlds) of 256 bytes; DIST_UNPACK_B16 reads 128
// bytes, element i into 16-bit lane 2 i (zero-extended into its 32-bit slot: lane 2 i + 1 zero)
template <typename T, LoadDist dist = LoadDist::DIST_NORM, typename U>
void LoadAlign(U& d, const T* src, TW_LINE) {
    static_assert(std::is_same<T, typename U::Elem>::value, "LoadAlign: T type is not correct");
    const uint64_t bytes = dist == LoadDist::DIST_NORM ? VL : VL / 2;
    auto dv = d.v;
    tw_emu::issue(tw_emu::PV, "LoadAlign", line, {tw_emu::Acc{tw_emu::SUB, ub_offset(src), bytes, false}}, [=] {
        Bytes out;
        if (dist == LoadDist::DIST_NORM) std::memcpy(out.b, src, VL);
        else for (uint64_t i = 0; i < VL / 4; ++i) std::memcpy(out.b + 4 * i, src + i, 2);
        *dv = out;
    }, REG_COST, bytes);
}
// StoreAlign (vsts) of the active lanes; DIST_PACK_B32 stores the low 16 bits of each active
// 32-bit slot, packed (128 bytes)
template <typename T, StoreDist dist = StoreDist::DIST_NORM, typename U>
void StoreAlign(T* dst, U& s, MaskReg& m, TW_LINE) {
    static_assert(std::is_same<T, typename U::Elem>::value, "StoreAlign: T type is not correct");
    const uint64_t bytes = dist == StoreDist::DIST_NORM ? VL : VL / 2;
    auto sv = s.v;
    auto mp = m.p;
    tw_emu::issue(tw_emu::PV, "StoreAlign", line, {tw_emu::Acc{tw_emu::SUB, ub_offset(dst), bytes, true}}, [=] {
        uint8_t* out = reinterpret_cast<uint8_t*>(dst);
        if (dist == StoreDist::DIST_NORM) {
            for (uint64_t i = 0; i < VL; i += sizeof(T))
                if (mp->b[i]) std::memcpy(out + i, sv->b + i, sizeof(T));
        } else {
            for (uint64_t i = 0; i < VL / 4; ++i)
                if (mp->b[4 * i]) std::memcpy(out + 2 * i, sv->b + 4 * i, 2);
        }
    }, REG_COST, bytes);
}

// kernel_reg_compute_vec_binary_intf.h
#define TW_REG_BINARY(NAME, EXPR)                                                              \
    template <typename T> void NAME(RegTensor<T>& d, RegTensor<T>& a, RegTensor<T>& b, MaskReg& m, TW_LINE) { \
        lanewise(#NAME, line, d, m, own_lane<T>(), [=](int i) { T x = a.lane(i), y = b.lane(i); return EXPR; }); \
    }
// Add, Sub and Mul as the count forms' (tw_emu::arith): Reg矢量计算/基础算术/Add.md "计算结果不保留进位",
// Mul.md "输出结果为不饱和模式"
TW_REG_BINARY(Add, tw_emu::arith<T>(x, y, std::plus<>())) TW_REG_BINARY(Sub, tw_emu::arith<T>(x, y, std::minus<>()))
TW_REG_BINARY(Mul, tw_emu::arith<T>(x, y, std::multiplies<>()))
TW_REG_BINARY(Div, x / y) TW_REG_BINARY(Max, x > y ? x : y) TW_REG_BINARY(Min, x < y ? x : y)
#undef TW_REG_BINARY
// kernel_reg_compute_vec_unary_intf.h (16-bit floats computed in float, rounded once)
#define TW_REG_UNARY(NAME, EXPR)                                                               \
    template <typename T> void NAME(RegTensor<T>& d, RegTensor<T>& a, MaskReg& m, TW_LINE) {   \
        lanewise(#NAME, line, d, m, own_lane<T>(), [=](int i) { float x = float(a.lane(i)); return T(EXPR); }); \
    }
TW_REG_UNARY(Exp, std::exp(x)) TW_REG_UNARY(Ln, std::log(x)) TW_REG_UNARY(Sqrt, std::sqrt(x))
TW_REG_UNARY(Abs, std::fabs(x)) TW_REG_UNARY(Relu, x > 0 ? x : 0.0f)
#undef TW_REG_UNARY
// kernel_reg_compute_vec_binary_scalar_intf.h
#define TW_REG_SCALAR(NAME, EXPR)                                                              \
    template <typename T, typename S> void NAME(RegTensor<T>& d, RegTensor<T>& a, S s, MaskReg& m, TW_LINE) { \
        T y = T(s);                                                                            \
        lanewise(#NAME, line, d, m, own_lane<T>(), [=](int i) { T x = a.lane(i); return EXPR; }); \
    }
TW_REG_SCALAR(Adds, tw_emu::arith<T>(x, y, std::plus<>())) TW_REG_SCALAR(Muls, tw_emu::arith<T>(x, y, std::multiplies<>())) TW_REG_SCALAR(Maxs, x > y ? x : y)
TW_REG_SCALAR(Mins, x < y ? x : y)
#undef TW_REG_SCALAR
// kernel_reg_compute_vec_duplicate_intf.h: a scalar, or lane 0 (HighLowPart::LOWEST), in every lane
template <typename T, typename S> void Duplicate(RegTensor<T>& d, S s, MaskReg& m, TW_LINE) {
    T y = T(s);
    lanewise("Duplicate", line, d, m, own_lane<T>(), [=](int) { return y; });
}
template <typename T> void Duplicate(RegTensor<T>& d, RegTensor<T>& a, MaskReg& m, TW_LINE) {
    lanewise("Duplicate", line, d, m, own_lane<T>(), [=](int) { return a.lane(0); });
}
// kernel_reg_compute_vec_reduce_intf.h: the active lanes into lane 0, the other lanes zero
template <ReduceType type, typename T> void Reduce(RegTensor<T>& d, RegTensor<T> a, MaskReg m, TW_LINE) {
    auto mp = m.p;
    lanewise("Reduce", line, d, m, [](int) { return uint64_t(0); }, [=](int i) {
        if (i) return T(0);
        float r = type == ReduceType::SUM ? 0.0f : float(a.lane(0));
        for (int j = 0; j < RegTensor<T>::N; ++j) {
            if (!mp->b[j * sizeof(T)]) continue;
            float x = float(a.lane(j));
            r = type == ReduceType::SUM ? r + x : type == ReduceType::MAX ? std::fmax(r, x) : std::fmin(r, x);
        }
        return T(r);
    });
}
// kernel_reg_compute_vec_vconv_intf.h: Cast between 16- and 32-bit floats by RegLayout ZERO (even
// 16-bit lanes) or ONE (odd); widening reads lanes 2 i + part under the source's mask, narrowing
// writes them (rounding to nearest even), the other lanes zero
template <typename D, typename S, const CastTrait& trait, typename DR, typename SR>
void Cast(DR& d, SR& s, MaskReg& m, TW_LINE) {
    static_assert(std::is_same<D, typename DR::Elem>::value && std::is_same<S, typename SR::Elem>::value,
                  "Cast: T and U are the registers' types");
    constexpr int part = trait.layoutMode == RegLayout::ONE ? 1 : 0;
    if constexpr (sizeof(D) > sizeof(S)) {
        lanewise("Cast", line, d, m, [](int i) { return uint64_t(2 * i + part) * sizeof(S); },
                 [=](int i) { return D(float(s.lane(2 * i + part))); });
    } else {
        lanewise("Cast", line, d, m, [](int i) { return uint64_t(i / 2) * sizeof(S); },
                 [=](int i) { return i % 2 == part ? D(float(s.lane(i / 2))) : D(0); });
    }
}
}  // namespace Reg
}  // namespace AscendC

// include/basic_api/kernel_common.h: asc_vf_call starts the vector function on a vector core
template <auto F, typename... Args> void asc_vf_call(Args&&... args) {
    if (::tw_emu::is_aiv()) F(args...);
}

namespace tw_emu {
template <typename T> const char* type_name() {
    if (sizeof(T) == 2 && !std::is_integral<T>::value) return std::is_same<T, half>::value ? "float16" : "bfloat16";
    if (std::is_same<T, float>::value) return "float32";
    if (std::is_same<T, bool>::value) return "bool";
    if (std::is_integral<T>::value) {
        static const char* names[2][4] = {{"uint8", "uint16", "uint32", "uint64"}, {"int8", "int16", "int32", "int64"}};
        return names[std::is_signed<T>::value][sizeof(T) == 1 ? 0 : sizeof(T) == 2 ? 1 : sizeof(T) == 4 ? 2 : 3];
    }
    return "unknown";
}
template <typename T> void name_tensor(const AscendC::LocalTensor<T>& t, const char* name) {
    name_range(t.space, t.off, uint64_t(t.count) * sizeof(T), name);
}
}  // namespace tw_emu

// SIMT vector functions of Ascend 950 (include/simt_api: asc_vf_call, threadIdx,
// asc_syncthreads). The call is one instruction of the V pipe touching the UB tiles passed to
// it; when it runs, the runtime runs the threads one after another up to each barrier (the
// order between barriers is the program's to not rely on) and reports two threads touching
// one UB byte, one writing, with no barrier between them.
#define __simt_vf__
#define __ubuf__
struct dim3 { uint32_t x = 1, y = 1, z = 1; };
namespace tw_emu {
struct SimtIndex { uint32_t x = 0, y = 0, z = 0; };
extern SimtIndex simt_index;
void simt_access(int space, uint64_t off, uint64_t len, bool write, int line);
bool simt_bounds(int64_t i, uint32_t count, int line);
void simt_barrier();
void simt_run(dim3 block, int core, int line, std::function<void()> body);
// a UB tile passed to a SIMT vector function: the elements [first, first + count) its
// threads may touch (mode: 1 read, 2 written, 3 both)
template <typename T> struct UbPtr {
    T* base; int space; uint64_t off; int64_t first; uint32_t count; int mode; int line;
    T load(int64_t i, int at) const {
        if (!simt_bounds(i - first, count, at)) return T();
        simt_access(space, off + uint64_t(i) * sizeof(T), sizeof(T), false, at);
        return base[i];
    }
    template <typename U> void store(int64_t i, const U& v, int at) const {
        if (!simt_bounds(i - first, count, at)) return;
        simt_access(space, off + uint64_t(i) * sizeof(T), sizeof(T), true, at);
        base[i] = static_cast<T>(v);
    }
};
template <typename T>
UbPtr<T> ub_arg(const AscendC::LocalTensor<T>& t, int mode, int64_t first, uint32_t count,
                int line) {
    if (first < 0 || first + count > t.count) {
        error(line, "asc_vf_call: elements [%lld, %lld) of a UB tile of %u elements",
              (long long)first, (long long)(first + count), t.count);
        count = 0;
    }
    return UbPtr<T>{t.data(), t.space, t.off, first, count, mode, line};
}
// a GM tensor passed to a SIMT vector function (include/simt_api/device_functions.h:
// asc_ldcg/asc_stcg through a __gm__ pointer): the elements [first, first + count) from its
// start its threads may touch; a thread's access is checked and recorded as a UB one is
template <typename T> struct GmPtr {
    T* base; int64_t first; uint32_t count; int mode; int line;
    uint64_t addr(int64_t i) const { return uint64_t(uintptr_t(base + i)); }
    T load(int64_t i, int at) const {
        if (!simt_bounds(i - first, count, at)) return T();
        simt_access(SGM, addr(i), sizeof(T), false, at);
        return base[i];
    }
    template <typename U> void store(int64_t i, const U& v, int at) const {
        if (!simt_bounds(i - first, count, at)) return;
        simt_access(SGM, addr(i), sizeof(T), true, at);
        base[i] = static_cast<T>(v);
    }
};
template <typename T>
GmPtr<T> gm_arg(const AscendC::GlobalTensor<T>& t, int mode, int64_t first, uint32_t count,
                int line) {
    return GmPtr<T>{t.data(), first, count, mode, line};
}
template <typename A> void vf_accesses(std::vector<Acc>&, uint64_t&, int&, const A&) {}
template <typename T> void vf_accesses(std::vector<Acc>& acc, uint64_t& bytes, int& line,
                                       const GmPtr<T>& p) {
    uint64_t n = uint64_t(p.count) * sizeof(T), at = p.addr(p.first);
    if (p.mode & 1) acc.push_back(Acc{SGM, at, n, false});
    if (p.mode & 2) acc.push_back(Acc{SGM, at, n, true});
    bytes += n;
    line = p.line;
}
template <typename T> void vf_accesses(std::vector<Acc>& acc, uint64_t& bytes, int& line,
                                       const UbPtr<T>& p) {
    uint64_t n = uint64_t(p.count) * sizeof(T), at = p.off + uint64_t(p.first) * sizeof(T);
    if (p.mode & 1) acc.push_back(Acc{p.space, at, n, false});
    if (p.mode & 2) acc.push_back(Acc{p.space, at, n, true});
    bytes += n;
    line = p.line;
}
}  // namespace tw_emu
#define threadIdx (::tw_emu::simt_index)
inline void asc_syncthreads() { ::tw_emu::simt_barrier(); }
namespace AscendC::Simt {  // kernel_simt_transcendental_intf.h, kernel_simt_math_intf.h
template <typename T> T Exp(T x) { return std::exp(x); }
template <typename T> T Log(T x) { return std::log(x); }
template <typename T> T Sqrt(T x) { return std::sqrt(x); }
template <typename T> T Rsqrt(T x) { return T(1) / std::sqrt(x); }
template <typename T> T Abs(T x) { return std::fabs(x); }
template <typename T> T Tanh(T x) { return std::tanh(x); }
template <typename T> T Sin(T x) { return std::sin(x); }
template <typename T> T Cos(T x) { return std::cos(x); }
}  // namespace AscendC::Simt
template <auto F, typename... A> void asc_vf_call(dim3 threads, A&&... args) {
    std::vector<tw_emu::Acc> acc;
    uint64_t bytes = 0;
    int line = 0;
    (tw_emu::vf_accesses(acc, bytes, line, args), ...);
    int core = tw_emu::is_aic() ? 0 : 1 + tw_emu::sub_block_idx();
    auto body = [=] { F(args...); };
    tw_emu::issue(tw_emu::PV, "asc_vf_call", line, std::move(acc),
                  [=] { tw_emu::simt_run(threads, core, line, body); }, 8.0 + bytes / 128.0,
                  bytes);
}
#define TW_UBUF(T) ::tw_emu::UbPtr<T>
#define TW_UB_ARG(T, t, mode, first, count) ::tw_emu::ub_arg<T>((t), (mode), (first), (count), __LINE__)
#define TW_UB_LOAD(p, i) (p).load((i), __LINE__)
#define TW_UB_STORE(p, i, v) (p).store((i), (v), __LINE__)
#define TW_GMBUF(T) ::tw_emu::GmPtr<T>
#define TW_GM_ARG(T, t, mode, first, count) ::tw_emu::gm_arg<T>((t), (mode), (first), (count), __LINE__)
#define TW_GM_LOAD(p, i) (p).load((i), __LINE__)
#define TW_GM_STORE(p, i, v) (p).store((i), (v), __LINE__)

// scalar-unit helpers of the generated source (plain C++ casts and selects on an NPU)
#define TW_CAST(T, x) ::tw_emu::cast<T>(x)
#define TW_BITCAST(T, U, x) ::tw_emu::bitcast<T, U>(x)
#define TW_SELECT(c, a, b) ::tw_emu::select_arm((c), [&] { return (a); }, [&] { return (b); })
#define TW_MIN(a, b) ::tw_emu::lmin((a), (b))
#define TW_MAX(a, b) ::tw_emu::lmax((a), (b))
#define TW_ISNAN(x) ::tw_emu::isnan_of(x)
#define TW_FABS(x) ::tw_emu::fabs_of(x)
#define TW_FLOORDIV(a, b) ::tw_emu::floordiv((a), (b))
#define TW_FLOORMOD(a, b) ::tw_emu::floormod((a), (b))
#define TW_DEVICE_ASSERT(c, msg) do { if (!(c)) ::tw_emu::assert_fail(__LINE__, (msg)); } while (0)
