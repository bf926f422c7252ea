"""PyTorch examples' word_language_model, as its main.py trains: an RNNModel (embedding, 2-layer
LSTM, decoder), truncated BPTT over a batchified token stream, hidden state repackaged each batch,
gradient clipping and a hand-written SGD update (no torch.optim): 24 updates on synthetic tokens.

The FLOPs are counted by hand (FlopCounterMode has no formula for the LSTM kernel): 2 FLOPs per
multiply-add, backward 2x forward, for the LSTM's input and recurrent matmuls and the decoder."""

import math

import torch
import torch.nn as nn
from truth import Clock, write

torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)

NTOKENS, EMSIZE, NHID, NLAYERS, BPTT, BATCH = 1000, 128, 128, 2, 35, 20
UPDATES = 24


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.init_weights()
        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return nn.functional.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i):
    seq_len = min(BPTT, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def hand_flops():
    tokens = BPTT * BATCH
    lstm = sum(4 * NHID * ((EMSIZE if layer == 0 else NHID) + NHID) for layer in range(NLAYERS))
    forward = 2 * tokens * (lstm + NHID * NTOKENS)
    return 3 * forward  # forward + backward (2x forward)


def main():
    train_data = batchify(torch.randint(0, NTOKENS, (BATCH * (UPDATES * BPTT + 1),)), BATCH)
    model = RNNModel("LSTM", NTOKENS, EMSIZE, NHID, NLAYERS, dropout=0.2)
    criterion = nn.NLLLoss()
    lr, clip = 20.0, 0.25

    model.train()
    total_loss = 0.0
    hidden = model.init_hidden(BATCH)
    clock = Clock()
    for batch, i in enumerate(range(0, train_data.size(0) - 1, BPTT)):
        data, targets = get_batch(train_data, i)
        # Starting each batch, we detach the hidden state from how it was previously produced.
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()

        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)

        total_loss += loss.item()
        clock.tick()
        if batch % 8 == 0 and batch > 0:
            cur_loss = total_loss / 8
            print(f"| batch {batch:3d} | lr {lr:02.2f} | loss {cur_loss:5.2f} | ppl {math.exp(min(cur_loss, 50)):8.2f}")
            total_loss = 0.0
    write(iterations=UPDATES, updates=UPDATES, micro_batches=1, times=clock.times, flops=hand_flops())


if __name__ == "__main__":
    main()
