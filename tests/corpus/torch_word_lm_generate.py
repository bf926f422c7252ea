"""PyTorch examples' word_language_model/generate.py as it is written: an LSTM language model
sampled one word at a time under `torch.no_grad()`, its hidden state carried, the next word drawn
with `torch.multinomial` and fed back with `input.fill_()`. No generate(), no marks: one request
(the script's whole output), one token per model call. (Random weights instead of a trained
checkpoint, and the words counted instead of written to a file.)

The script clocks itself: from the loop's start to its first drawn word, then per word."""

import argparse
import time

import torch
import torch.nn as nn
from truth import write

parser = argparse.ArgumentParser(description="PyTorch Language Model")
parser.add_argument("--words", type=int, default=120, help="number of words to generate")
parser.add_argument("--temperature", type=float, default=1.0, help="temperature - higher will increase diversity")
parser.add_argument("--log-interval", type=int, default=40, help="reporting interval")
args = parser.parse_args()

torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(1111)
NTOKENS = 5000


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nlayers, self.nhid = nlayers, nhid

    def forward(self, input, hidden):
        emb = self.encoder(input)
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(output).view(-1, NTOKENS)
        return nn.functional.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


model = RNNModel(NTOKENS, 200, 200, 2)
model.eval()
hidden = model.init_hidden(1)
input = torch.randint(NTOKENS, (1, 1), dtype=torch.long)
words = []
start = time.perf_counter()
with torch.no_grad():  # no tracking history
    for i in range(args.words):
        output, hidden = model(input, hidden)
        word_weights = output.squeeze().div(args.temperature).exp().cpu()
        word_idx = torch.multinomial(word_weights, 1)[0]
        input.fill_(word_idx)
        words.append(time.perf_counter())
        if i % args.log_interval == 0:
            print(f"| Generated {i}/{args.words} words")
end = time.perf_counter()
weights = sum(p.numel() * p.element_size() for p in model.parameters())
write(requests=1, prompt_tokens=None, generated_tokens=args.words, ttft=[words[0] - start], tpot=[(end - words[0]) / (args.words - 1)],
      tokens_per_s=args.words / (end - start), weight_bytes=weights, kv_bytes=0)
