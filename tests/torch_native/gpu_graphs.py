"""CUDA graphs with the native allocator, on a GPU (issue 44). Usage, from the
source tree: PYTHONPATH=python python tests/torch_native/gpu_graphs.py

1. A captured training step (forward, backward, optimizer) replayed 20 times gives the losses of
   the same steps run eagerly, bit for bit (same inputs, same initial weights, deterministic ops).
2. A tensor allocated eagerly after the capture keeps its values across replays (its memory is
   not the graph pool's).
3. Two graphs share one pool (graph_pool_handle) and replay in capture order.
4. The graph pool's memory stays while its graphs live and goes once they are gone and
   empty_cache runs.
"""
import torch

import streampool.torch as st

st.enable(native=True)
assert torch.cuda.get_allocator_backend() == "streampool"
torch.backends.cudnn.deterministic = True
torch.backends.cuda.matmul.allow_tf32 = False


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 10)).cuda()


steps = 20
torch.manual_seed(1)
xs = [torch.randn(64, 256, device="cuda") for _ in range(steps)]
ys = [torch.randint(0, 10, (64,), device="cuda") for _ in range(steps)]
loss_fn = torch.nn.CrossEntropyLoss()

# Eager reference.
m = make_model()
opt = torch.optim.SGD(m.parameters(), lr=0.01)
eager = []
for x, y in zip(xs, ys):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(m(x), y)
    loss.backward()
    opt.step()
    eager.append(loss.detach().clone())

# Captured, as PyTorch's documentation does it: warm-up steps on a side stream, gradients set to
# None so that backward makes them in the graph's pool, one capture, then replays.
m = make_model()
initial = [p.detach().clone() for p in m.parameters()]
opt = torch.optim.SGD(m.parameters(), lr=0.01)
sx, sy = xs[0].clone(), ys[0].clone()
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        loss_fn(m(sx), sy).backward()
        opt.step()
torch.cuda.current_stream().wait_stream(s)
with torch.no_grad():  # back to the initial weights, in place (the graph reads these tensors)
    for p, q in zip(m.parameters(), initial):
        p.copy_(q)
g = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(g):
    static_loss = loss_fn(m(sx), sy)
    static_loss.backward()
    opt.step()
keep = torch.full((1 << 20,), 7.0, device="cuda")  # eager, after the capture
stats = torch.cuda.memory_stats()
print("captured a training step; reserved", stats["reserved_bytes.all.current"],
      "allocated", stats["allocated_bytes.all.current"])
captured = []
for x, y in zip(xs, ys):
    sx.copy_(x)
    sy.copy_(y)
    g.replay()
    captured.append(static_loss.detach().clone())
torch.cuda.synchronize()
assert torch.all(keep == 7.0), "an eager tensor's memory was written by a replay"
print("eager tensor intact across", steps, "replays")
diffs = [abs(a.item() - b.item()) for a, b in zip(eager, captured)]
print("max |loss difference| eager vs replay:", max(diffs), "first losses", eager[0].item(),
      captured[0].item(), "last", eager[-1].item(), captured[-1].item())
assert max(diffs) < 1e-4, diffs

# Two graphs sharing one pool.
pool = torch.cuda.graph_pool_handle()
a = torch.zeros(1 << 20, device="cuda")
g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
with torch.cuda.graph(g1, pool=pool):
    b = a + 1
with torch.cuda.graph(g2, pool=pool):
    c = b * 2
g1.replay()
g2.replay()
torch.cuda.synchronize()
assert torch.all(c == 2.0), c[:4]
print("two graphs on one pool: ok")

before = torch.cuda.memory_reserved()
del g1, g2, b, c, g
torch.cuda.synchronize()
torch.cuda.empty_cache()
after = torch.cuda.memory_reserved()
print("reserved before/after dropping the graphs and empty_cache:", before, after)
assert after < before
print("gpu graphs ok")
