"""Models as learners bring them from Hugging Face: a real GPT-2 built from a config (no weights, no download),
and a small stand-in of the same shape (keyword inputs, an output object holding .loss and .logits).

Both take ``input_ids``, ``attention_mask`` and ``labels`` as keywords; padding is ``attention_mask == 0`` and
its labels are -100, as a data collator sets them.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 100


def gpt2(dropout: float = 0.0, layers: int = 2):
    """GPT2LMHeadModel with ``layers`` blocks of width 32; every dropout of its config at ``dropout``."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()  # the config's notes on token ids outside this tiny vocabulary
    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=16, bos_token_id=0,
                        eos_token_id=0, resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
    return GPT2LMHeadModel(config)


def padded_batch(lengths=(3, 8, 12, 12), length: int = 12, seed: int = 0) -> dict:
    """A tokenizer-style batch: one row per length, padded to ``length`` (mask 0, label -100)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (len(lengths), length), generator=g)
    mask = (torch.arange(length) < torch.tensor(lengths).unsqueeze(1)).long()
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def shifted_counts(labels, sizes) -> list:
    """Labels that count per micro-batch, compared one position on, as a causal language model does."""
    return [int(c.sum()) for c in (labels[:, 1:] != -100).split(list(sizes))]


@dataclass
class TinyOutput:
    """What the stand-in returns: like a ModelOutput, a loss (when given labels) and logits."""

    loss: torch.Tensor | None
    logits: torch.Tensor


class TinyLM(nn.Module):
    """Embedding -> dropout -> linear -> dropout -> linear, with its own token-mean loss over the labels that
    count (no shift). Two dropouts: one alone can draw the full batch's masks for its micro-batches by accident."""

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.mix, self.head = nn.Embedding(VOCAB, 16), nn.Linear(16, 16), nn.Linear(16, VOCAB)
        self.drop = nn.Dropout(dropout)

    def forward(self, input_ids, attention_mask=None, labels=None):
        h = self.drop(torch.tanh(self.mix(self.drop(self.embed(input_ids)))))
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1)
        logits = self.head(h)
        loss = None if labels is None else token_mean(logits, labels)
        return TinyOutput(loss, logits)


def token_mean(logits, labels):
    """A learner's own loss: cross-entropy summed over the labels that count, divided by their number."""
    keep = labels != -100
    per_token = F.cross_entropy(logits.flatten(0, 1), labels.clamp(min=0).flatten(), reduction="none")
    return (per_token * keep.flatten()).sum() / keep.sum()
