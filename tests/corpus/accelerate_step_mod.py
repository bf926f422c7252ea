"""Hugging Face's older `*_no_trainer.py` examples through accelerate: gradient accumulation by
`step % gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1`, so the first update
runs 1 micro-batch (step 0), then 4 each, and the last one what is left (1): 62 micro-batches, 17
updates."""

import torch
from accelerate import Accelerator
from torch_truth import update_flops
from truth import Clock, write

GRADIENT_ACCUMULATION_STEPS, MICRO_BATCHES = 4, 62
torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)


def loss_of(m, x):
    return (m(x) ** 2).mean()


def main():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train_dataloader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(MICRO_BATCHES * 64, 256)), batch_size=64)
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(model, optimizer, train_dataloader, lr_scheduler)

    clock, completed_steps, per_update, since = Clock(), 0, [], 0
    model.train()
    for step, (x,) in enumerate(train_dataloader):
        loss = loss_of(model, x)
        loss = loss / GRADIENT_ACCUMULATION_STEPS
        accelerator.backward(loss)
        since += 1
        if step % GRADIENT_ACCUMULATION_STEPS == 0 or step == len(train_dataloader) - 1:
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            completed_steps += 1
            per_update.append(since)
            since = 0
            clock.tick()
    x = torch.randn(64, 256)
    write(iterations=MICRO_BATCHES, updates=completed_steps, micro_batches=GRADIENT_ACCUMULATION_STEPS, per_update=per_update, times=clock.times,
          flops=update_flops(model, [x] * GRADIENT_ACCUMULATION_STEPS, loss_of))


if __name__ == "__main__":
    main()
