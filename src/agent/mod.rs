//! The node agent: turns what a node knows about its accelerators (kernel log,
//! NVML, DCGM, npu-smi) into Node conditions and Events the controller reads.
