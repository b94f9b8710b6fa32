"""A captured GPT-2 training step with the native allocator, on a GPU (issue 44). Usage, from the
source tree: PYTHONPATH=python python tests/torch_native/gpu_gpt2_graph.py

The whole step (forward, backward, AdamW) is captured once, as PyTorch's documentation does it
(warm-up on a side stream, gradients set to None so that backward makes them in the graph's pool),
and replayed 20 times on 20 batches. Its losses must be those of the same 20 steps run eagerly
from the same weights. Deterministic algorithms and no dropout, so that both runs compute the
same thing; the script prints whether they agree bit for bit and fails above a relative 1e-5.
"""
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

import streampool.torch as st  # noqa: E402

st.enable(native=True)
assert torch.cuda.get_allocator_backend() == "streampool"
torch.use_deterministic_algorithms(True)
torch.backends.cuda.matmul.allow_tf32 = False

STEPS = 20
config = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
gen = torch.Generator().manual_seed(1)
batches = [torch.randint(0, config.vocab_size, (4, 256), generator=gen).cuda()
           for _ in range(STEPS)]


def make():
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).cuda()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=True)


def train_step(model, opt, x):
    loss = model(x, labels=x).loss
    loss.backward()
    opt.step()
    return loss


model, opt = make()
eager = []
for x in batches:
    opt.zero_grad(set_to_none=True)
    eager.append(train_step(model, opt, x).detach().clone())

model, opt = make()
initial = [p.detach().clone() for p in model.parameters()]
static_x = batches[0].clone()
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        train_step(model, opt, static_x)
torch.cuda.current_stream().wait_stream(side)
# Back to the initial weights and a fresh optimizer state, in place (the graph reads these).
with torch.no_grad():
    for p, q in zip(model.parameters(), initial):
        p.copy_(q)
    for state in opt.state.values():
        for k, v in state.items():
            if torch.is_tensor(v):
                v.zero_()
graph = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(graph):
    static_loss = train_step(model, opt, static_x)
stats = torch.cuda.memory_stats()
print("captured a GPT-2 training step; reserved", stats["reserved_bytes.all.current"],
      "allocated", stats["allocated_bytes.all.current"])
captured = []
for x in batches:
    static_x.copy_(x)
    graph.replay()
    captured.append(static_loss.detach().clone())
torch.cuda.synchronize()
e = torch.stack(eager).double()
c = torch.stack(captured).double()
rel = ((e - c).abs() / e.abs()).max().item()
for name, losses in (("eager:   ", e), ("replayed:", c)):
    print("GPT-2 losses,", name, [round(v, 6) for v in losses.tolist()[:4]], "...",
          round(losses[-1].item(), 6))
print("bit for bit:", torch.equal(e, c), "max relative difference:", rel)
assert rel < 1e-5, rel
print("gpu gpt2 graph ok")
