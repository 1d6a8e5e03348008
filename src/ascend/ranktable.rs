//! HCCL-Controller's rank tables (`rings-config-<job>` / `hccl.json`).
//! Not yet implemented.
