#pragma once
// Note [Fused elementwise programs]
// A `fused_elementwise` node computes a tree of elementwise operators in one
// kernel. Its program is a postfix (stack machine) code: each instruction is
// one byte, opcode * 8 + argument:
//
//   load  i   (opcode 1)  push input tensor i (0 <= i < 5)
//   unary f   (opcode 2)  replace the top: f = neg exp sqrt rsqrt erf relu silu gelu (0..7)
//   binary f  (opcode 3)  pop b, pop a, push a f b: f = add sub mul div (0..3)
//   addc  k   (opcode 4)  top + constant k (0 <= k < 6): add_scalar
//   mulc  k   (opcode 5)  top * constant k: mul_scalar
//
// The IR keeps the program as node attributes (`code`: one int per
// instruction; `c0`..`c5`: the constants), so it prints and parses like any
// node. The kernel receives it in the POD argument block (Note [Kernel ABI]):
// scalar slots 0 and 1 hold up to 16 instruction bytes, little end first, a 0
// byte ending the program early; slots 2..7 hold the six constants as
// doubles. With the output in the last tensor slot, at most 5 inputs fit. A
// program is at most 16 instructions, keeps at most 8 values on its stack and
// ends with exactly one; the pass splits longer chains.
//
// Every step computes in f32 and, for f16/bf16, rounds its result to the
// storage type, exactly as the separate kernels do when they store each
// intermediate: the fused node is bitwise equal to the chain it replaces.
#include <cstdint>
#include <span>
#include <string>

#include "sinkgraph/kernel_abi.h"

namespace sinkgraph::kernels::fused {

inline constexpr int kMaxCode = 16;
inline constexpr int kCodeSlots = 2;
inline constexpr int kMaxConsts = kMaxScalarArgs - kCodeSlots;  // 6
inline constexpr int kMaxInputs = kMaxTensorArgs - 1;           // 5
inline constexpr int kMaxStack = 8;

enum Opcode : int { kLoad = 1, kUnary = 2, kBinary = 3, kAddConst = 4, kMulConst = 5 };
enum UnaryFn : int { kNeg, kExp, kSqrt, kRsqrt, kErf, kRelu, kSilu, kGelu, kNumUnary };
enum BinaryFn : int { kAdd, kSub, kMul, kDiv, kNumBinary };

constexpr std::int64_t encode(Opcode op, int arg) { return op * 8 + arg; }
constexpr int opcode_of(std::int64_t instr) { return static_cast<int>(instr >> 3); }
constexpr int arg_of(std::int64_t instr) { return static_cast<int>(instr & 7); }

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
    } else if (op == kUnary || op == kAddConst || op == kMulConst) {
      if (op == kUnary && arg >= kNumUnary) return at + " names no unary function";
      if (op != kUnary && arg >= kMaxConsts) return at + " names no constant";
      if (depth < 1) return at + " has no operand on the stack";
    } else if (op == kBinary) {
      if (arg >= kNumBinary) return at + " names no binary function";
      if (depth < 2) return at + " needs two operands on the stack";
      --depth;
    } else {
      return at + " has an unknown opcode (expected opcode*8+arg with opcode 1..5)";
    }
  }
  if (depth != 1) return "the program leaves " + std::to_string(depth) + " values; expected 1";
  if (loaded != (1U << num_inputs) - 1U) return "the program does not load every input";
  return {};
}

}  // namespace sinkgraph::kernels::fused
