#pragma once
// Note [Fused elementwise programs]
// A `fused_elementwise` node computes a tree of elementwise operators in one
// kernel. Its program is a postfix (stack machine) code: each instruction is
// one byte, opcode * 8 + argument:
//
//   load  i   (opcode 1)  push input tensor i (0 <= i < 5)
//   unary f   (opcode 2)  replace the top: f = neg exp sqrt rsqrt erf relu silu gelu (0..7)
//   unary2 f  (opcode 6)  the same for unary functions 8..15: f - 8 = tanh sigmoid
//                         hardswish hardsigmoid cos sin (0..5)
//   binary f  (opcode 3)  pop b, pop a, push a f b: f = add sub mul div (0..3)
//   addc  k   (opcode 4)  top + constant k (0 <= k < 5): add_scalar
//   mulc  k   (opcode 5)  top * constant k: mul_scalar
//
// The program is node attributes: `code0`, `code1`, `code2` pack six 6-bit
// instructions each, the first in the lowest bits (code0 = i0 + 64*i1 + ...;
// a 0 digit ends the program), and `c0`..`c4` are the constants. Each is an
// ordinary int or float attribute, so the node prints and parses like any
// other (a packed int stays below 2^36, within the IR's 2^40 literal bound;
// an int list would not: the IR bounds the product of a list's elements).
// The dispatcher puts them in the POD argument block as it does every scalar
// (Note [Kernel ABI]): slots 0..2 the code, slots 3..7 the constants. With
// the output in the last tensor slot, at most 5 inputs fit. A program is at
// most 18 instructions, keeps at most 8 values on its stack and ends with
// exactly one; the pass splits longer chains.
//
// Every step computes in f32 and, for f16/bf16, rounds its result to the
// storage type, exactly as the separate kernels do when they store each
// intermediate: the fused node is bitwise equal to the chain it replaces.
#include <cstdint>
#include <span>
#include <string>

#include "sinkgraph/kernel_abi.h"

namespace sinkgraph::kernels::fused {

inline constexpr int kCodeSlots = 3;
inline constexpr int kInstrPerSlot = 6;
inline constexpr int kMaxCode = kCodeSlots * kInstrPerSlot;     // 18
inline constexpr int kMaxConsts = kMaxScalarArgs - kCodeSlots;  // 5
inline constexpr int kMaxInputs = kMaxTensorArgs - 1;           // 5
inline constexpr int kMaxStack = 8;

enum Opcode : int {
  kLoad = 1,
  kUnary = 2,
  kBinary = 3,
  kAddConst = 4,
  kMulConst = 5,
  kUnaryHi = 6
};
enum UnaryFn : int {
  kNeg,
  kExp,
  kSqrt,
  kRsqrt,
  kErf,
  kRelu,
  kSilu,
  kGelu,
  kTanh,  // 8: the first function of opcode 6 (kUnaryHi)
  kSigmoid,
  kHardswish,
  kHardsigmoid,
  kCos,
  kSin,
  kNumUnary
};
enum BinaryFn : int { kAdd, kSub, kMul, kDiv, kNumBinary };

constexpr std::int64_t encode(Opcode op, int arg) { return op * 8 + arg; }
constexpr int opcode_of(std::int64_t instr) { return static_cast<int>(instr >> 3); }
constexpr int arg_of(std::int64_t instr) { return static_cast<int>(instr & 7); }
// The instruction applying unary function `fn`, and the function an
// instruction of opcode kUnary or kUnaryHi applies.
constexpr std::int64_t encode_unary(int fn) {
  return fn < 8 ? encode(kUnary, fn) : encode(kUnaryHi, fn - 8);
}
constexpr int unary_fn(std::int64_t instr) {
  return opcode_of(instr) == kUnaryHi ? 8 + arg_of(instr) : arg_of(instr);
}

// The packed form of a program (instructions in 1..63; at most kMaxCode).
inline void pack_program(std::span<const std::int64_t> code, std::int64_t (&slots)[kCodeSlots]) {
  for (auto& s : slots) s = 0;
  for (std::size_t i = 0; i < code.size(); ++i) {
    slots[i / kInstrPerSlot] |= code[i] << (6 * (i % kInstrPerSlot));
  }
}

// The instructions of a packed program, up to the first 0 digit.
inline int unpack_program(const std::int64_t* slots, std::uint8_t (&code)[kMaxCode]) {
  int n = 0;
  for (int s = 0; s < kCodeSlots; ++s) {
    for (int i = 0; i < kInstrPerSlot; ++i) {
      const auto digit = static_cast<std::uint8_t>((slots[s] >> (6 * i)) & 63);
      if (digit == 0) return n;
      code[n++] = digit;
    }
  }
  return n;
}

// Checks a program for `num_inputs` inputs: every instruction valid, the
// stack never underflows nor exceeds kMaxStack, one value left at the end,
// every input loaded. Returns an empty string when valid, else the reason.
inline std::string check_program(std::span<const std::int64_t> code, int num_inputs) {
  if (code.empty() || code.size() > static_cast<std::size_t>(kMaxCode)) {
    return "the program has " + std::to_string(code.size()) + " instructions; expected 1 to " +
           std::to_string(kMaxCode);
  }
  int depth = 0;
  unsigned loaded = 0;
  for (std::size_t i = 0; i < code.size(); ++i) {
    const std::int64_t c = code[i];
    const int op = c < 0 ? 0 : opcode_of(c);
    const int arg = c < 0 ? 0 : arg_of(c);
    const std::string at = "instruction " + std::to_string(i) + " (" + std::to_string(c) + ")";
    if (op == kLoad) {
      if (arg >= num_inputs) {
        return at + " loads input " + std::to_string(arg) + " of " + std::to_string(num_inputs);
      }
      loaded |= 1U << arg;
      if (++depth > kMaxStack) return at + " exceeds the stack of " + std::to_string(kMaxStack);
    } else if (op == kUnary || op == kUnaryHi || op == kAddConst || op == kMulConst) {
      if ((op == kUnary || op == kUnaryHi) && unary_fn(c) >= kNumUnary) {
        return at + " names no unary function";
      }
      if ((op == kAddConst || op == kMulConst) && arg >= kMaxConsts)
        return at + " names no constant";
      if (depth < 1) return at + " has no operand on the stack";
    } else if (op == kBinary) {
      if (arg >= kNumBinary) return at + " names no binary function";
      if (depth < 2) return at + " needs two operands on the stack";
      --depth;
    } else {
      return at + " has an unknown opcode (expected opcode*8+arg with opcode 1..6)";
    }
  }
  if (depth != 1) return "the program leaves " + std::to_string(depth) + " values; expected 1";
  if (loaded != (1U << num_inputs) - 1U) return "the program does not load every input";
  return {};
}

}  // namespace sinkgraph::kernels::fused
