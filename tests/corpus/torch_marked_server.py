"""A hand-written generation server loop in PyTorch, marked with `tpu_perf.request()` and
`tpu_perf.token()`: PyTorch examples' word_language_model/generate.py sampling loop (an LSTM language
model fed one word at a time under `torch.no_grad()`, its hidden state carried, the next word drawn
with `torch.multinomial`), served for 5 requests of 2 sequences each (a batch), each with a 12-word
prompt fed word by word and 40 new words.

The script clocks itself: each request from its start to its first sampled word, then per word; and
the wall time of all requests."""

import time

import torch
import torch.nn as nn
from truth import write

import tpu_perf

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
        with tpu_perf.request(prompt_tokens=PROMPT * BATCH, sequences=BATCH):
            hidden = model.init_hidden(BATCH)
            output, hidden = model(prompt, hidden)  # the prompt, as generate.py primes it
            for i in range(WORDS):
                if i:
                    output, hidden = model(input, hidden)
                word_weights = output[-1].div(TEMPERATURE).exp().cpu()
                input = torch.multinomial(word_weights, 1).view(1, BATCH)
                tpu_perf.token(BATCH)
                if i == 0:
                    first = time.perf_counter()
        end = time.perf_counter()
        ttft.append(first - start)
        tpot.append((end - first) / (WORDS - 1))
wall = time.perf_counter() - began
write(requests=REQUESTS * BATCH, prompt_tokens=REQUESTS * PROMPT * BATCH, generated_tokens=REQUESTS * BATCH * WORDS, ttft=ttft, tpot=tpot, tokens_per_s=REQUESTS * BATCH * WORDS / wall)
