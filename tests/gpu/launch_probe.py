"""Which driver entry points do framework kernel launches reach? Run under GPUSLICE_LOG_LEVEL=trace."""
import torch
a = torch.randn(1024, 1024, device="cuda")
for _ in range(20):
    a = a @ a
    a = a / a.norm()
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    b = a * 2
    with torch.cuda.graph(g):
        b = a * 2
g.replay()
torch.cuda.synchronize()
print("done")
