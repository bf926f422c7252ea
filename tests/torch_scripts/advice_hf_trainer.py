"""Hugging Face Trainer on a tiny GPT-2 built from a config (no download), a synthetic token dataset,
logging every 10 steps: `Trainer(model, args, train_dataset).train()` as the HF course writes it."""

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

torch.manual_seed(0)
config = GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=2)
model = GPT2LMHeadModel(config)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        self.ids = torch.randint(0, 512, (n, 64))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


args = TrainingArguments(output_dir="/tmp/tpu-perf-hf-out", per_device_train_batch_size=8, max_steps=30, logging_steps=10,
                         save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
Trainer(model=model, args=args, train_dataset=Tokens(256)).train()
