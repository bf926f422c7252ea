"""Lightning, as its users write it: the training loss logged with `self.log(..., prog_bar=True)`
(Lightning turns it into a number with .item() at every step, progress bar shown or not) and a
validation every 10 batches. `--quiet-log`: logged without prog_bar (converted every
log_every_n_steps)."""

import argparse

import lightning as L
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--quiet-log", action="store_true")
args = parser.parse_args()
torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, prog_bar=not args.quiet_log)
        return loss

    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(-1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


train = torch.utils.data.TensorDataset(torch.randn(20 * 32, 64), torch.randint(0, 10, (20 * 32,)))
val = torch.utils.data.TensorDataset(torch.randn(2 * 32, 64), torch.randint(0, 10, (2 * 32,)))
trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, val_check_interval=10, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Classifier(), torch.utils.data.DataLoader(train, batch_size=32), torch.utils.data.DataLoader(val, batch_size=32))
