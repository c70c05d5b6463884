# herd's facts about a node's Python and torch, for the doctor's probe: facts.sh runs this
# with the job's interpreter (`python -c`). Python 3.8+. argv: $1 `import`: import torch too,
# which takes seconds; else torch's version only.
# stdout: `herd-fact NAME=VALUE` lines.
import platform
import sys

print("herd-fact python=" + platform.python_version())
try:
    import importlib.metadata as m

    print("herd-fact torch=" + m.version("torch"))
except Exception:
    print("herd-fact torch=")
if sys.argv[1:2] == ["import"]:
    try:
        import torch
        import torch.distributed as d

        print("herd-fact torch_import=ok")
        print("herd-fact cuda=" + str(torch.version.cuda))
        try:
            print("herd-fact nccl=" + ".".join(map(str, torch.cuda.nccl.version())))
        except Exception:
            print("herd-fact nccl=none")
        print("herd-fact nccl_available=" + str(d.is_nccl_available()))
    except Exception as e:
        print("herd-fact torch_import=" + repr(e)[:300].replace("\n", " "))
