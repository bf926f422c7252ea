"""Hugging Face Trainer on a tiny randomly initialised GPT-2 (no hub download), gradient
accumulation 2: 24 micro-batches, 12 optimizer updates."""

import torch
from torch.utils.data import Dataset
from torch_truth import tiny_gpt2, update_flops
from transformers import Trainer, TrainerCallback, TrainingArguments
from truth import Clock, write

ACCUM, UPDATES, BATCH, SEQ = 2, 12, 4, 64
torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription


class Tokens(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 512, (n, SEQ), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Ticks(TrainerCallback):
    def __init__(self):
        self.clock = None

    def on_train_begin(self, *a, **k):
        self.clock = Clock()

    def on_step_end(self, *a, **k):
        self.clock.tick()


model = tiny_gpt2()
ticks = Ticks()
args = TrainingArguments(output_dir="/tmp/tpu_perf_corpus_hf", per_device_train_batch_size=BATCH, gradient_accumulation_steps=ACCUM, max_steps=UPDATES,
                         learning_rate=1e-4, logging_strategy="no", save_strategy="no", report_to=[], use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=Tokens(BATCH * ACCUM * UPDATES), callbacks=[ticks])
trainer.train()
ids = Tokens(BATCH).ids
flops = update_flops(model, [{"input_ids": ids, "labels": ids}] * ACCUM, lambda m, b: m(**b).loss / ACCUM)
write(iterations=UPDATES * ACCUM, updates=UPDATES, micro_batches=ACCUM, times=ticks.clock.times, flops=flops)
