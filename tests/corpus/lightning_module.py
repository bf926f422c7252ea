"""Lightning: a LightningModule trained by `Trainer(accumulate_grad_batches=2)` on the CPU:
32 micro-batches, 16 optimizer updates."""

import lightning as L
import torch
from torch_truth import update_flops
from truth import Clock, write

ACCUM, UPDATES = 2, 16
torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))

    def training_step(self, batch, _):
        (x,) = batch
        return (self.net(x) ** 2).mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class Ticks(L.Callback):
    def __init__(self):
        self.clock, self.updates = Clock(), 0

    def on_train_batch_end(self, trainer, *a):  # after each micro-batch: tick when it ended an update
        if trainer.global_step != self.updates:
            self.updates = trainer.global_step
            self.clock.tick()


data = torch.utils.data.TensorDataset(torch.randn(ACCUM * UPDATES * 64, 256))
model, ticks = Net(), Ticks()
trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, accumulate_grad_batches=ACCUM, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[ticks])
trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=64))
x = torch.randn(64, 256)
write(iterations=ACCUM * UPDATES, updates=UPDATES, micro_batches=ACCUM, times=ticks.clock.times, flops=update_flops(model.net, [x] * ACCUM, lambda m, b: (m(b) ** 2).mean()))
