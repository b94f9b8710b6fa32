"""torch.compile(mode="reduce-overhead") on the native allocator (issue 44), on a GPU machine, from
the source tree: PYTHONPATH=python python tests/torch_native/gpu_compile.py

CUDA graph trees record graphs into one private pool, check its live blocks
(checkPoolLiveAllocations) and save and put back its layout (getCheckpointState,
setCheckpointPoolState). Checked: a compiled training loop gives eager's losses (to float
rounding: the compiled kernels sum in another order), generation of growing length (one graph per
length) gives eager's tokens, and the checkpoint calls were made and succeeded."""
import collections
import copy

import torch

import streampool.torch as st

st.enable(native=True)
assert torch.cuda.get_allocator_backend() == "streampool"

# Count the graph trees' calls into the allocator (they are made through these names).
calls = collections.Counter()
for name in ("_cuda_getCheckpointState", "_cuda_setCheckpointPoolState",
             "_cuda_checkPoolLiveAllocations"):
    original = getattr(torch._C, name)

    def counted(*args, _original=original, _name=name):
        calls[_name] += 1
        return _original(*args)

    setattr(torch._C, name, counted)

# 1. Training: forward and backward graphs in one pool, the optimizer eager.
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 10)).cuda()
reference = copy.deepcopy(model)
data = [(torch.randn(64, 256, device="cuda"), torch.randint(0, 10, (64,), device="cuda")) for _ in range(4)]


def losses_of(net, fn, steps=12):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    out = []
    for i in range(steps):
        x, y = data[i % len(data)]
        loss = torch.nn.functional.cross_entropy(fn(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append(loss.item())
    return out


compiled_losses = losses_of(model, torch.compile(model, mode="reduce-overhead"))
eager_losses = losses_of(reference, reference)
worst = max(abs(a - b) for a, b in zip(compiled_losses, eager_losses))
print(f"training: {len(compiled_losses)} steps, max |compiled - eager| loss {worst:.2e}")
assert worst < 1e-4, (compiled_losses, eager_losses)

# 2. Generation of growing length: a graph per length, all in the same pool; each new recording
# starts from the layout the tree expects.
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

torch.manual_seed(0)
gpt = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=256, n_head=4)).cuda().eval()


def next_logits(ids):
    return gpt(ids).logits[:, -1, :]


fast = torch.compile(next_logits, mode="reduce-overhead", dynamic=True)
prompt = torch.randint(0, 50257, (2, 8), device="cuda")


def generate(fn, n=24):
    ids = prompt
    with torch.no_grad():
        for _ in range(n):
            ids = torch.cat([ids, fn(ids).argmax(-1, keepdim=True)], 1)
    return ids[:, prompt.shape[1]:].tolist()


runs = [generate(fast) for _ in range(4)]  # warm-up, recording, then replays
eager = generate(next_logits)
print("generation:", "eager's tokens" if runs[-1] == eager else "DIFFERENT tokens",
      "; all runs agree" if all(r == runs[0] for r in runs) else "; runs DIFFER")
assert runs[-1] == eager and all(r == runs[0] for r in runs)
stats = torch.cuda.memory_stats()
print("allocator calls by the graph trees:", dict(calls))
print("segments", stats["segment.all.current"], "inactive split", stats["inactive_split.all.current"],
      "reserved", stats["reserved_bytes.all.current"])
print("gpu compile ok")
