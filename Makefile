# Developer shortcuts. Everything here is also a plain command; see README.md.
PYTHON ?= .venv/bin/python

.PHONY: test kernels gpu-check

test:
	./scripts/test

# Compile every CUDA kernel (PTX, cubin, ptxas report) for ARCH, default: this GPU's, else sm_90.
kernels:
	$(PYTHON) -m workers.cuda.build $(if $(ARCH),--arch $(ARCH)) --out build/kernels

# On one NVIDIA GPU: build the kernels, run the GPU tests and the event-vs-host comparison,
# and write gpu-report/report.md (or $OUT/report.md).
gpu-check:
	./scripts/gpu-check
