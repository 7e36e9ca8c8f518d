"""EAGLE / EAGLE-3 speculative decoding: draft a chain, verify it against the target's tokens.

One decode round per running batch: the draft takes the target's hidden states at the position
before the last token plus the last token, runs `--speculative-num-steps` forwards (feeding its
own hidden state back after the first), and each proposal is checked against the target's true
next token. Accepted = the matching prefix plus one bonus token from the target. With
`--speculative-eagle-topk` k > 1 a proposal counts as matching when the true token is among the
draft's top k at that depth and the tree still has room for it: reaching the child of rank r costs
r + 1 of the `--speculative-num-draft-tokens` - 1 tree nodes (a best-first tree).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sglang.srt import _torch as torch
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.models.rehearsal_target import text_model
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

logger = logging.getLogger(__name__)


@dataclass
class EagleDraftInput:
    hidden_states: object


@dataclass
class ForwardBatch:
    input_ids: object
    positions: object
    spec_info: EagleDraftInput
    batch_size: int


@dataclass
class RoundResult:
    new_tokens: list[list[int]]  # per request: accepted drafts + bonus token
    num_correct_drafts: list[int]


class EAGLEWorker:
    def __init__(self, server_args, gpu_id: int, tp_rank: int, target_worker: ModelRunner, memory):
        self.server_args = server_args
        self.target_worker = target_worker
        self.topk = server_args.speculative_eagle_topk
        self.speculative_num_steps = server_args.speculative_num_steps
        self.speculative_num_draft_tokens = server_args.speculative_num_draft_tokens
        draft_config = ModelConfig(
            server_args.speculative_draft_model_path,
            context_length=target_worker.model_config.context_len,
            is_draft_model=True,
        )
        self.draft_model_runner = ModelRunner(draft_config, server_args, gpu_id, tp_rank, memory, is_draft_worker=True)
        algorithm = SpeculativeAlgorithm.from_string(server_args.speculative_algorithm)
        self.hot_token_id = None  # EAGLE's --speculative-token-map is not emulated
        draft = self.draft_model_runner.model

        # A target class without this method fails here, after the draft has loaded.
        embed, head = target_worker.model.get_embed_and_head()

        if algorithm.is_eagle3():
            # most cases EAGLE3 models don't share lm_head
            if getattr(draft, "load_lm_head_from_target", False):
                draft.set_embed_and_head(embed, head)
            else:
                draft.set_embed(embed)
            # grab hot token ids
            self.hot_token_id = draft.get_hot_token_id()
        else:
            # EAGLE shares the target's embedding and full-vocabulary lm_head with the draft
            draft.set_embed_and_head(embed, head)

    def forward_round(self, contexts: list[list[int]]) -> RoundResult:
        target = self.target_worker.model
        oracle = text_model(target)
        self.target_worker.check_forward()
        bs = len(contexts)
        prev = torch.tensor([ctx[-2] if len(ctx) > 1 else 0 for ctx in contexts])
        spec_info = EagleDraftInput(hidden_states=target(prev))
        forward_batch = ForwardBatch(
            input_ids=torch.tensor([ctx[-1] for ctx in contexts]),
            positions=torch.tensor([len(ctx) - 1 for ctx in contexts]),
            spec_info=spec_info,
            batch_size=bs,
        )
        accepted: list[list[int]] = [[] for _ in contexts]
        bonus: list[int | None] = [None] * bs
        tree_nodes = [0] * bs  # draft tokens a best-first tree spends to reach the accepted path
        for _ in range(self.speculative_num_steps):
            out = self.draft_model_runner.model(forward_batch.input_ids, forward_batch.positions, forward_batch)
            _, topk_index = out.next_token_logits.topk(self.topk, dim=-1)
            candidates = self._map_to_target_ids(topk_index).tolist()
            next_ids = [row[0] for row in candidates]
            alive = [i for i in range(bs) if bonus[i] is None]
            truth = oracle.next_token_ids([contexts[i] + accepted[i] for i in alive])
            for i, true_id in zip(alive, truth):
                if true_id in candidates[i]:
                    tree_nodes[i] += candidates[i].index(true_id) + 1
                if true_id in candidates[i] and tree_nodes[i] < self.speculative_num_draft_tokens:
                    accepted[i].append(true_id)
                    next_ids[i] = true_id
                else:
                    bonus[i] = true_id
            forward_batch.input_ids = torch.tensor(next_ids)
            forward_batch.positions = forward_batch.positions + 1
            spec_info.hidden_states = out.hidden_states
        alive = [i for i in range(bs) if bonus[i] is None]
        for i, true_id in zip(alive, oracle.next_token_ids([contexts[i] + accepted[i] for i in alive])):
            bonus[i] = true_id
        return RoundResult([accepted[i] + [bonus[i]] for i in range(bs)], [len(a) for a in accepted])

    def _map_to_target_ids(self, topk_index):
        if self.hot_token_id is None:  # a draft without d2t drafts in the target vocabulary
            return topk_index
        return self.hot_token_id[topk_index]
