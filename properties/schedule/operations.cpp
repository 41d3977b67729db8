// The table of schedule operations (operation.h): one row per Call::Kind,
// in its order. A new operation is its own file, its Call::Kind and a row
// here (docs/OPERATIONS.md, "Adding an operation").
#include <array>
#include <set>
#include <stdexcept>

#include "properties/schedule/operation.h"

namespace kvcheck {

extern const Operation kStartOperation, kStepOperation, kFinishOperation, kResetOperation,
    kForkOperation, kTruncateOperation, kFlushOperation, kEraseOperation, kShiftOperation,
    kVerifyOperation, kAbortOperation, kOffloadOperation, kSaveOperation, kRestoreOperation,
    kDivOperation;

namespace {

const std::array<const Operation*, 15> kTable = {
    &kStartOperation, &kStepOperation,     &kFinishOperation, &kResetOperation,
    &kForkOperation,  &kTruncateOperation, &kFlushOperation,  &kEraseOperation,
    &kShiftOperation, &kVerifyOperation,   &kAbortOperation,  &kOffloadOperation,
    &kSaveOperation,  &kRestoreOperation,  &kDivOperation};

std::vector<Operation> table_in_kind_order() {
  std::vector<Operation> out;
  for (const Operation* op : kTable) {
    if (static_cast<size_t>(op->kind) != out.size()) {
      throw std::logic_error("operations.cpp: the table is not in Call::Kind order");
    }
    if (!op->precondition || !op->apply || !op->plan || !op->run) {
      throw std::logic_error("operations.cpp: " + std::string(op->keyword) +
                             " lacks a precondition, apply, plan or run");
    }
    out.push_back(*op);
  }
  return out;
}

}  // namespace

std::span<const Operation> operations() {
  static const std::vector<Operation> table = table_in_kind_order();
  return table;
}

const Operation& operation(Call::Kind kind) {
  const std::span<const Operation> all = operations();
  const size_t i = static_cast<size_t>(kind);
  if (i >= all.size()) throw std::logic_error("operation: unknown call kind");
  return all[i];
}

std::string written_arguments(const Call& call) {
  const Operation& op = operation(call.kind);
  if (op.arguments) return op.arguments(call);
  std::string out;
  for (const Argument& a : op.syntax) {
    if (!out.empty()) out += " ";
    out += (a.sequence ? "s" : "") + std::to_string(call.*a.field);
  }
  return out;
}

std::vector<int> smaller_values(int current, int lo, std::initializer_list<int> extra) {
  std::set<int> values = {lo, current / 2, current - 1};
  values.insert(extra.begin(), extra.end());
  std::vector<int> out;
  for (int v : values) {
    if (v >= lo && v < current) out.push_back(v);
  }
  return out;
}

const Operation* find_operation(std::string_view keyword) {
  for (const Operation& op : operations()) {
    if (op.keyword == keyword) return &op;
  }
  return nullptr;
}

}  // namespace kvcheck
