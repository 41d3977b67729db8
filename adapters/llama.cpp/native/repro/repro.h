// The llama.h reproductions of docs/LLAMA_CPP.md's native-driver findings
// and of docs/findings/llama_cpp_state_after_fork_stale.md, one function
// per finding, and the two helpers they share: each finding's own file says
// what it shows. Each prints what it saw and returns whether the finding
// still shows (main.cpp: exit 0 when every one does).
#pragma once

#include <vector>

#include "llama.h"

namespace kvcheck_repro {

// A context of n_seq sequences (kv_unified as given), one thread, 256
// cells per sequence.
llama_context* context_of(llama_model* model, int n_seq, bool unified);

// Decodes tokens at positions first.. of one sequence, logits of the last:
// llama_decode's return code.
int decode(llama_context* ctx, const std::vector<llama_token>& tokens, llama_pos first,
           llama_seq_id seq);

// memory_calls.cpp: the shared shift (kv_unified true) and seq_keep's
// other streams (kv_unified false), each run in both modes.
bool shared_shift_shows(llama_model* model);
bool keep_shows(llama_model* model);

// stale_state.cpp: a sequence state read before the decode that applies a
// pending stream copy (a fork) or a pending K shift.
bool stale_after_fork_shows(llama_model* model);
bool stale_after_shift_shows(llama_model* model);

}  // namespace kvcheck_repro
