"""A PyTorch character-level GRU language model, as char-RNN tutorials train it: nn.Embedding,
a 2-layer nn.GRU with its hidden state carried (detached) from batch to batch, nn.Linear,
CrossEntropyLoss, torch.optim.Adam and gradient clipping: 20 updates on synthetic text.

The FLOPs are counted by hand: 2 FLOPs per multiply-add, backward 2x forward, for the GRU's three
gates on the input and on the state in each layer, and the decoder."""

import torch
import torch.nn as nn
from truth import Clock, write

torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)

VOCAB, EMBED, HIDDEN, LAYERS, SEQ, BATCH = 96, 64, 192, 2, 50, 16
UPDATES = 20


class CharRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED)
        self.gru = nn.GRU(EMBED, HIDDEN, LAYERS, batch_first=True)
        self.fc = nn.Linear(HIDDEN, VOCAB)

    def forward(self, x, hidden):
        out, hidden = self.gru(self.embed(x), hidden)
        return self.fc(out), hidden


def hand_flops():
    gru = sum(3 * HIDDEN * ((EMBED if layer == 0 else HIDDEN) + HIDDEN) for layer in range(LAYERS))
    return 3 * 2 * BATCH * SEQ * (gru + HIDDEN * VOCAB)


def main():
    text = torch.randint(0, VOCAB, (BATCH, UPDATES * SEQ + 1))
    model = CharRNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    criterion = nn.CrossEntropyLoss()
    hidden = torch.zeros(LAYERS, BATCH, HIDDEN)
    clock = Clock()
    for step in range(UPDATES):
        x = text[:, step * SEQ:(step + 1) * SEQ]
        y = text[:, step * SEQ + 1:(step + 1) * SEQ + 1]
        hidden = hidden.detach()
        logits, hidden = model(x, hidden)
        loss = criterion(logits.reshape(-1, VOCAB), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        if step % 5 == 0:
            print(f"step {step} loss {loss.item():.3f}")
        clock.tick()
    write(iterations=UPDATES, updates=UPDATES, micro_batches=1, times=clock.times, flops=hand_flops())


if __name__ == "__main__":
    main()
