"""PyTorch Lightning: a LightningModule with self.log of the loss and Trainer.fit for 30 steps, as
the Lightning quick start writes it."""

import lightning as L
import torch
from torch import nn


class LitMLP(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(1920, 32), torch.randint(0, 10, (1920,)))
loader = torch.utils.data.DataLoader(data, batch_size=64)
trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(LitMLP(), loader)
