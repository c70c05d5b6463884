# herd's facts about a node's Python and torch, for the doctor's probe: facts.sh runs this
# with the job's interpreter (`python -c`). Python 3.8+. argv: $1 `import`: import torch too,
# which takes seconds; else torch's version only.
# stdout: `herd-fact NAME=VALUE` lines.
#
# It runs on every node of every preflight: `platform` and `importlib.metadata` would take
# 100 to 150 ms of CPU there, five times the interpreter's own start, so it reads the
# distribution's metadata as importlib.metadata does, without it.
import os
import sys

print("herd-fact python=" + sys.version.split()[0])


def torch_metadata_files(folder):
    """The metadata files of torch distributions in one sys.path entry, in the order
    importlib.metadata looks at them: the entry itself when it is a torch .egg folder
    (`setup.py install`, through easy-install.pth), else its dist-info's METADATA and its
    egg-info's PKG-INFO (a folder, or the file itself)."""
    base = os.path.basename(folder).lower()
    if base.startswith("torch-") and base.endswith(".egg"):
        return [os.path.join(folder, "EGG-INFO", "PKG-INFO")]
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    files = []
    for name in names:
        low = name.lower()
        path = os.path.join(folder or ".", name)
        if not (low.startswith("torch-") or low.startswith("torch.")):
            continue
        if low.endswith(".dist-info"):
            files.append(os.path.join(path, "METADATA"))
        elif low.endswith(".egg-info"):
            files.append(os.path.join(path, "PKG-INFO") if os.path.isdir(path) else path)
    return files


def torch_version():
    """The first torch distribution on sys.path, as importlib.metadata would find it: the
    Version of its metadata (headers are case-insensitive); empty where there is none."""
    for folder in sys.path:
        for path in torch_metadata_files(folder):
            try:
                with open(path, encoding="utf-8") as f:
                    for line in f:
                        if line[:8].lower() == "version:":
                            return line.split(":", 1)[1].strip()
                        if not line.strip():
                            break
            except OSError:
                pass
    return ""


try:
    print("herd-fact torch=" + torch_version())
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
