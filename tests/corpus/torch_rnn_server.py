"""A hand-written generation server loop in PyTorch with no marks (tests/corpus/torch_marked_server.py
without them): PyTorch examples' word_language_model/generate.py sampling loop (an LSTM language
model fed one word at a time under `torch.no_grad()`, its hidden state carried, the next word drawn
with `torch.multinomial`), served for 5 requests of 2 sequences each (a batch), each with a 12-word
prompt fed at once, sequence-first (12, 2), and 40 new words.

The script clocks itself: each request from its start to its first sampled word, then per word; and
the wall time of all requests."""

import time

import torch
import torch.nn as nn
from truth import write

torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)

NTOKENS, EMSIZE, NHID, NLAYERS = 2000, 256, 256, 2
REQUESTS, BATCH, PROMPT, WORDS, TEMPERATURE = 5, 2, 12, 40, 1.0


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(NTOKENS, EMSIZE)
        self.rnn = nn.LSTM(EMSIZE, NHID, NLAYERS)
        self.decoder = nn.Linear(NHID, NTOKENS)

    def forward(self, input, hidden):
        output, hidden = self.rnn(self.encoder(input), hidden)
        return self.decoder(output), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(NLAYERS, bsz, NHID), weight.new_zeros(NLAYERS, bsz, NHID))


model = RNNModel().eval()
ttft, tpot = [], []
began = time.perf_counter()
with torch.no_grad():
    for _ in range(REQUESTS):
        prompt = torch.randint(NTOKENS, (PROMPT, BATCH), dtype=torch.long)
        start = time.perf_counter()
        hidden = model.init_hidden(BATCH)
        output, hidden = model(prompt, hidden)  # the prompt, sequence-first, as generate.py primes it
        for i in range(WORDS):
            if i:
                output, hidden = model(input, hidden)
            word_weights = output[-1].div(TEMPERATURE).exp().cpu()
            input = torch.multinomial(word_weights, 1).view(1, BATCH)
            if i == 0:
                first = time.perf_counter()
        end = time.perf_counter()
        ttft.append(first - start)
        tpot.append((end - first) / (WORDS - 1))
wall = time.perf_counter() - began
weights = sum(p.numel() * p.element_size() for p in model.parameters())
write(requests=REQUESTS * BATCH, prompt_tokens=REQUESTS * PROMPT * BATCH, generated_tokens=REQUESTS * BATCH * WORDS, ttft=ttft, tpot=tpot, tokens_per_s=REQUESTS * BATCH * WORDS / wall,
      weight_bytes=weights, kv_bytes=0)
