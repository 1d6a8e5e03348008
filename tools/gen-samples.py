#!/usr/bin/env python3
"""Generate the data-driven sample FaultClassifications from the shared fault data.

Writes, from the files in the shared fault-data folder (read in place, never copied):

  samples/classifications/nvidia-xid.yaml   from xid-catalog.tsv and xid-nvlink5-decode.tsv
  samples/classifications/ascend-npu.yaml   from ascend/faultCode.json, ascend/faultCustomization.json,
                                            ascend/faultDuration.json, ascend/relationFaultCustomization.json,
                                            ascend/SwitchFaultCode.json and ascend/ascend-codes.tsv

The generated YAML is committed. Run this by hand when the data changes (not in CI):

  python3 tools/gen-samples.py [--data /path/to/shared/data/faults]

The data folder defaults to $REBOUND_FAULT_DATA, else <repo>/../shared/data/faults.
The mapping decisions (which NVIDIA bucket becomes which level, and why) live in this file
and are written into the header comments of the generated YAML.
"""

import argparse
import csv
import json
import os
import sys
from collections import Counter, OrderedDict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --------------------------------------------------------------------------------------------
# NVIDIA XID
# --------------------------------------------------------------------------------------------

# Rules in evaluation order (first match wins inside one FaultClassification). Each entry:
# (name, level, description, codes-or-None, when-or-None). Codes are filled from GROUP_OF below
# when None.
NVLINK5 = list(range(144, 151))

# Which group (rule) each XID belongs to; groups not listed are derived from the catalog's
# NVIDIA immediate-resolution bucket in xid_group().
EXPLICIT_GROUP = {
    # app-class XIDs that device-plugin also skips (13, 31, 68) and the contained memory error
    # (94): the app is restarted, a second sighting on the same GPU within 24h blames the GPU.
    13: "app-error-gpu-suspect",
    31: "app-error-gpu-suspect",
    68: "app-error-gpu-suspect",
    94: "app-error-gpu-suspect",
    # usually the echo of the app being torn down (by another XID or by a restart).
    43: "app-teardown",
    45: "app-teardown",
    # uncontained memory errors: NVIDIA says RESET_GPU; we separate (see header).
    95: "uncontained-memory-error",
    140: "uncontained-memory-error",
    # the node needs a reboot (RESTART_BM / RESTART_VM, and the newest codes gpud says reboot for).
    79: "node-reboot-required",
    151: "node-reboot-required",
    166: "node-reboot-required",
    167: "node-reboot-required",
    # double-bit ECC and its newer detail codes.
    48: "double-bit-ecc",
    171: "double-bit-ecc",
    172: "double-bit-ecc",
    74: "nvlink-error",
    # same description as XID 62 ("Internal micro-controller halt"), which is RESET_GPU.
    169: "reset-gpu",
    # degraded but usable hardware: no new work, running work may finish.
    54: "degraded-hardware",
    78: "degraded-hardware",
    163: "degraded-hardware",
    165: "degraded-hardware",
    168: "degraded-hardware",
    # informational.
    162: "ignore",
    164: "ignore",
    # CHECK_UVM (sympathetic report) and a CC-mode interrupt gpud sends to the app: restart.
    159: "restart-app",
    170: "restart-app",
}

BUCKET_GROUP = {
    "RESTART_APP": "restart-app",
    "RESET_GPU": "reset-gpu",
    "RESTART_BM": "node-reboot-required",
    "RESTART_VM": "node-reboot-required",
    "IGNORE": "ignore",
    "CONTACT_SUPPORT": "contact-support",
    "CHECK_MECHANICALS": "degraded-hardware",
    "UPDATE_SWFW": "degraded-hardware",
    "CHECK_UVM": "restart-app",
    "WORKFLOW_XID_48": "double-bit-ecc",
    "WORKFLOW_XID_45": "app-teardown",
    "WORKFLOW_NVLINK_ERR": "nvlink-error",
}

# (name, level, description) in rule order; the NVLink5 and XID 154 rules carry CEL.
# Groups never share a code (except within the NVLink5 and XID 154 families, whose rules keep
# their order), so the order between groups changes no result; the groups XIDs most often hit
# come first because every rule passed costs a lookup per fault.
XID_RULES = [
    ("app-error-gpu-suspect", "RestartJob",
     "NVIDIA RESTART_APP, app-class: the fault is confined to the application, which is restarted. "
     "13, 31 and 68 are also skipped by k8s-device-plugin, so no health check ever blames the GPU; 94 is "
     "a contained memory error. The same XID twice on one GPU within 24h escalates to ResetDevice."),
    ("app-teardown", "Ignore",
     "43 (IGNORE bucket) and 45 (WORKFLOW_XID_45: 'Not Solo: IGNORE, follow the other Xid'): the channel "
     "is torn down because the app died or was killed - by another XID or by a restart, rebound's own "
     "included. Restarting on them would loop; ten on one GPU within an hour cordon the node."),
    ("restart-app", "RestartJob",
     "NVIDIA RESTART_APP (and CHECK_UVM 159, 170 with no bucket yet): the application's context is broken, "
     "the GPU is fine: restart the job. Three times on one GPU within 24h escalates to ResetDevice."),
    ("node-reboot-required", "Separate",
     "NVIDIA RESTART_BM (79, GPU fallen off the bus) and RESTART_VM (151): only a reboot of the machine "
     "brings the GPU back; 166 (CC crypto error) and 167 (PCIe fatal timeout) have no NVIDIA bucket yet and "
     "gpud says RebootSystem. Restart jobs elsewhere, cordon and taint the node."),
    ("double-bit-ecc", "ResetDevice",
     "48 (double-bit ECC, NVIDIA WORKFLOW_XID_48: reset the GPU so the row is remapped; if remapping "
     "fails, XID 64 follows) and its detail codes 171/172 (DRAM/SRAM) that have no bucket yet."),
    ("uncontained-memory-error", "Separate",
     "95 (uncontained memory error) and 140 (ECC error escaped): NVIDIA's bucket is RESET_GPU, but the "
     "corruption may have reached other contexts and peers; NVSentinel and gpud call both fatal. Separate "
     "the node until a person has checked the remap/reset."),
    ("reset-gpu", "ResetDevice",
     "NVIDIA immediate resolution RESET_GPU: the GPU must be reset before reuse. 109 is skipped by "
     "k8s-device-plugin as an application error, but NVIDIA and NVSentinel ask for a reset. 169 has no "
     "bucket yet; its description matches 62 (micro-controller halt, RESET_GPU)."),
    ("nvlink-error", "ResetDevice",
     "74 NVLink error, NVIDIA WORKFLOW_NVLINK_ERR: reset the GPU, then check the link; a link that keeps "
     "failing is escalated to Separate."),
    ("nvlink5-nonfatal", "Ignore",
     "XIDs 144-150 (NVLink5, GB200), NVIDIA bucket WORKFLOW_NVLINK5_ERR: the kernel line says Fatal or "
     "Nonfatal. Every Non-fatal row of NVIDIA's decode table resolves to IGNORE or XID_154_EVAL (the "
     "follow-up XID 154 then carries the action), so a Nonfatal line is recorded only."),
    ("nvlink5-fatal", "ResetDevice",
     "XIDs 144-150 whose line is Fatal (or carries no message to decode): NVIDIA's decode table resolves "
     "the Fatal/Link Fatal rows to RESET_GPU (2 of 26 fatal rows say IGNORE; we do not decode intrinfo "
     "bits, so we take the safe side)."),
    ("xid154-node-reboot", "Separate",
     "XID 154 'GPU recovery action changed ... to 0x2 (Node Reboot Required)': NVIDIA's action is in the "
     "message; a node reboot is needed, so the node is separated until it comes back healthy."),
    ("xid154-gpu-reset", "ResetDevice",
     "XID 154 '... to 0x1 (GPU Reset Required)', 0x3 (Drain P2P: stop peer traffic, then re-query) or "
     "0x5 (GPU Reset Bus): jobs on the GPU must stop and the GPU be reset."),
    ("xid154-drain-and-reset", "PreSeparate",
     "XID 154 '... to 0x4 (Drain and Reset)': the GPU runs at reduced capacity; let running work "
     "drain (no new work), reset afterwards."),
    ("xid154-informational", "Ignore",
     "XID 154 to 0x0 (None), or a message we cannot read: NVIDIA calls XID 154 informational about "
     "another XID, which is classified on its own."),
    ("degraded-hardware", "PreSeparate",
     "Degraded but usable: CHECK_MECHANICALS (54, aux power), UPDATE_SWFW (78, vGPU start), and the "
     "newest power-smoothing / memory-capacity codes (163, 165, 168). No new work; running work may finish."),
    ("contact-support", "PreSeparate",
     "NVIDIA immediate resolution CONTACT_SUPPORT: no automatic remedy, a person must look. Nearly all are "
     "retired ('Unused') codes that only old drivers emit. NVSentinel treats them as fatal; we only cordon "
     "(running jobs are not killed; if they crash, their exit restarts them)."),
    ("ignore", "Ignore",
     "NVIDIA immediate resolution IGNORE (and the informational power-smoothing codes 162, 164): "
     "recorded, nothing done. If the app dies, its own exit restarts it. 63 (row remapping) and 92 "
     "(high single-bit ECC rate) escalate to PreSeparate when they repeat: the memory is wearing out."),
]

XID_RULE_WHEN = {
    "nvlink5-nonfatal": "fault.message.contains('Nonfatal') || fault.message.contains('Non-fatal')",
    "xid154-node-reboot": r"fault.message.matches('to 0x0*2\\b')",
    "xid154-gpu-reset": r"fault.message.matches('to 0x0*[135]\\b')",
    "xid154-drain-and-reset": r"fault.message.matches('to 0x0*4\\b')",
}

XID_ESCALATIONS = [
    # (name, codes-from-groups or explicit, times, within, level, comment)
    ("app-error-repeats-on-one-gpu", ["13", "31", "68", "94"], 2, "24h", "ResetDevice",
     "the same app-class XID twice on one GPU within a day points at the GPU, not the app"),
    ("app-error-keeps-recurring", "restart-app", 3, "24h", "ResetDevice",
     "any other RESTART_APP XID three times on one GPU within a day"),
    ("teardown-storm", ["43", "45"], 10, "1h", "PreSeparate",
     "more teardowns than the default restart budget (5/h) can cause: something else is wrong; cordon"),
    ("memory-degrading", ["63", "92"], 3, "24h", "PreSeparate",
     "repeated row-remapping events (63) or high single-bit ECC rates (92): memory is wearing out"),
    ("reset-does-not-help", "reset-set", 3, "24h", "Separate",
     "a GPU that needs a third reset within a day is not healing: separate it"),
]


def xid_group(row):
    x = int(row["xid"])
    if x in EXPLICIT_GROUP:
        return EXPLICIT_GROUP[x]
    if x in NVLINK5:
        return "nvlink5"
    if x == 154:
        return "xid154"
    b = row["nvidia_immediate_resolution"]
    if b not in BUCKET_GROUP:
        sys.exit(f"xid {x}: no level decided for NVIDIA bucket {b!r}; add it to EXPLICIT_GROUP")
    return BUCKET_GROUP[b]


def xid_comment(row, decode=None):
    parts = [f"{row['mnemonic']}: {row['description']}"]
    inv = row["nvidia_investigatory_resolution"] or "-"
    imm = row["nvidia_immediate_resolution"] or "(no bucket yet)"
    parts.append(f"NVIDIA: {imm}; investigate: {inv}")
    others = []
    if row["k8s_device_plugin_skipped"] == "yes":
        others.append("device-plugin skips")
    if row["nvsentinel_fatal"]:
        others.append("NVSentinel " + ("fatal" if row["nvsentinel_fatal"] == "yes" else "non-fatal"))
    if row["gpud_event_type"]:
        g = "gpud " + row["gpud_event_type"]
        if row["gpud_repair_actions"]:
            g += " (" + row["gpud_repair_actions"] + ")"
        others.append(g)
    if others:
        parts.append("; ".join(others))
    if decode:
        parts.append(decode)
    return " | ".join(parts)


def nvlink5_summary(rows):
    by = {}
    for r in rows:
        x = int(r["xid"])
        d = by.setdefault(x, {"units": [], "res": Counter()})
        if r["unit"] not in d["units"]:
            d["units"].append(r["unit"])
        d["res"][r["resolution"]] += 1
    out = {}
    for x, d in by.items():
        res = ", ".join(f"{k} x{v}" for k, v in sorted(d["res"].items()))
        out[x] = f"decode: units {', '.join(d['units'])}; {res}"
    return out


def yq(s):
    """A YAML double-quoted scalar."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def ysq(s):
    """A YAML single-quoted scalar (CEL reads best this way)."""
    return "'" + s.replace("'", "''") + "'"


def wrap_flow(head, items, width=100):
    """A YAML flow sequence, wrapped: `head[a, b,` / `  c]`."""
    lines, cur = [], head + "["
    for i, it in enumerate(items):
        tok = it + ("]" if i == len(items) - 1 else ",")
        if len(cur) + 1 + len(tok) > width and not cur.endswith("["):
            lines.append(cur)
            cur = " " * (len(head) + 1) + tok
        else:
            cur = cur + ("" if cur.endswith("[") else " ") + tok
    lines.append(cur)
    return "\n".join(lines) + "\n"


def wrap(text, prefix, width=100):
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(prefix) + len(cur) + 1 + len(w) > width:
            lines.append(prefix + cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(prefix + cur)
    return "\n".join(lines)


XID_HEADER = """\
# GENERATED by tools/gen-samples.py from the shared fault data (xid-catalog.tsv,
# xid-nvlink5-decode.tsv). Edit the generator, not this file, then rerun it.
#
# NVIDIA XID -> rebound level, for every XID of NVIDIA's catalog (1-172; NVIDIA
# catalog snapshot 2025-10-29 as tabulated by gpud). Beside each code: NVIDIA's
# mnemonic and description, its "immediate" and "investigatory" resolution,
# and how k8s-device-plugin, NVSentinel and gpud treat it.
#
# How NVIDIA's immediate resolution maps to levels (DESIGN.md §2):
#
#   RESTART_BM, RESTART_VM (reboot)   -> Separate     restart jobs elsewhere, cordon + taint
#   79 "fallen off the bus"           -> Separate     the GPU is gone until the machine reboots
#   uncontained ECC (95, 140)         -> Separate     NVIDIA says RESET_GPU; we are stricter, see rule
#   RESET_GPU, WORKFLOW_XID_48 (48),
#   WORKFLOW_NVLINK_ERR (74),
#   Fatal NVLink5 (144-150)           -> ResetDevice  restart jobs on the node, cordon until it clears
#   CHECK_MECHANICALS, UPDATE_SWFW    -> PreSeparate  degraded: no new work, running work may finish
#   CONTACT_SUPPORT                   -> PreSeparate  a person must look; mostly retired codes
#   RESTART_APP, CHECK_UVM            -> RestartJob   the app's context broke, the GPU is fine
#   IGNORE, Nonfatal NVLink5          -> Ignore       recorded only
#   XID_154 (154)                     -> read from the message: the new recovery action
#                                        (None, GPU Reset, Node Reboot, Drain P2P, Drain and Reset)
#   162-172 (no NVIDIA bucket yet)    -> decided per code from the description and gpud's action
#
# App-class XIDs are not ignored (unlike k8s-device-plugin, which skips 13, 31,
# 43, 45, 68 and 109): they restart the job, and escalations below blame the
# GPU when the same XID repeats on the same GPU (13/31/68/94: twice in 24h ->
# ResetDevice). 43 and 45 are Ignore: they are the echo of an application being
# killed - by the XID that really failed (classified on its own) or by a
# restart, including rebound's - so restarting on them would loop.
#
# Escalations count the same code on the same GPU (node + device). They assume
# the reporter sends one fault per incident: a burst of identical kernel lines
# (one XID 13 line per SM) must be coalesced by the agent, or the count runs ahead.
#
# Rules come in the order XIDs are most often seen (app errors first): no two
# groups share a code, so the order only saves lookups; the NVLink5 and XID 154
# rules, which share codes and decide by CEL over the message, keep their order.
#
# A code no rule lists gets defaultLevel RestartJob (restart, touch no node).
# To change a code, do not edit this file: apply a FaultClassification for
# source NvidiaXid with a higher priority and a rule for that code (README.md).
"""


def gen_xid(data):
    with open(os.path.join(data, "xid-catalog.tsv"), newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    with open(os.path.join(data, "xid-nvlink5-decode.tsv"), newline="") as f:
        decode = nvlink5_summary(list(csv.DictReader(f, delimiter="\t")))
    groups = OrderedDict((name, []) for name, _, _ in XID_RULES)
    nvl, x154 = [], []
    for r in rows:
        g = xid_group(r)
        if g == "nvlink5":
            nvl.append(r)
        elif g == "xid154":
            x154.append(r)
        else:
            groups[g].append(r)
    level_of = {name: level for name, level, _ in XID_RULES}
    out = [XID_HEADER]
    out.append("apiVersion: rebound.dev/v1alpha1\nkind: FaultClassification\nmetadata:\n  name: nvidia-xid\n"
               "  labels:\n    app.kubernetes.io/part-of: rebound\nspec:\n  source: NvidiaXid\n"
               "  # Cluster admins override single codes with a higher-priority object.\n"
               "  priority: 100\n  defaultLevel: RestartJob\n  rules:\n")
    covered = set()
    for name, level, desc in XID_RULES:
        if name.startswith("nvlink5"):
            members = nvl
        elif name.startswith("xid154"):
            members = x154
        else:
            members = groups[name]
        if not members:
            continue
        out.append(f"  - name: {name}\n    level: {level}\n")
        out.append("    description: >-\n" + wrap(desc, "      ") + "\n")
        if name in XID_RULE_WHEN:
            out.append(f"    when: {ysq(XID_RULE_WHEN[name])}\n")
        out.append("    codes:\n")
        for r in members:
            x = int(r["xid"])
            covered.add(x)
            out.append(f"    - {yq(str(x)):6} # {xid_comment(r, decode.get(x))}\n")
    missing = {int(r["xid"]) for r in rows} - covered
    if missing:
        sys.exit(f"XIDs without a rule: {sorted(missing)}")
    # Escalations.
    reset_set = [str(int(r["xid"])) for g in ("double-bit-ecc", "nvlink-error", "reset-gpu") for r in groups[g]]
    out.append("  # Frequency escalations: per code, per GPU (node + device).\n  escalations:\n")
    for name, codes, times, within, level, comment in XID_ESCALATIONS:
        if codes == "restart-app":
            codes = [str(int(r["xid"])) for r in groups["restart-app"]]
        elif codes == "reset-set":
            codes = reset_set
        out.append(f"  # {comment}\n  - name: {name}\n")
        out.append(wrap_flow("    codes: ", [yq(c) for c in codes]))
        out.append(f"    times: {times}\n    within: {within}\n    level: {level}\n")
    # Sanity: every escalation code has a rule whose level is below the escalation's.
    return "".join(out), len(rows)


# --------------------------------------------------------------------------------------------
# Ascend NPU
# --------------------------------------------------------------------------------------------

# faultCode.json list -> (rule name, level). Order = Ascend device plugin's GetFaultTypeByCode
# (mind-cluster component/ascend-device-plugin/pkg/common/fault_code.go), so a code listed twice
# (A2301001 in RestartBusiness and SeparateNPU) gets the level the device plugin gives it.
ASCEND_LISTS = [
    ("SeparateNPUCodes", "separate-npu", "Separate",
     "SeparateNPU: the chip is unusable; isolate it. Jobs restart elsewhere; the node is cordoned and tainted."),
    ("PreSeparateNPUCodes", "pre-separate-npu", "PreSeparate",
     "PreSeparateNPU: no new work is scheduled to the chip; running work may finish."),
    ("RestartNPUCodes", "restart-npu", "ResetDevice",
     "RestartNPU: reset the chip now and re-run the job."),
    ("FreeRestartNPUCodes", "free-restart-npu", "ResetDevice",
     "FreeRestartNPU: reset the chip when it is idle. rebound has one reset level (DESIGN.md §2): the "
     "job restarts and the node stays cordoned until the fault clears."),
    ("RestartBusinessCodes", "restart-business", "RestartJob",
     "RestartBusiness: restart the workload; the hardware is fine."),
    ("RestartRequestCodes", "restart-request", "RestartJob",
     "RestartRequest: re-execute the request/job; the hardware is fine."),
    ("NotHandleFaultCodes", "not-handle", "Ignore",
     "NotHandleFault: informational, no handling."),
    ("SubHealthFaultCodes", "sub-health", "PreSeparate",
     "SubHealthFault: handled per the job's subHealthyStrategy in MindCluster; rebound has no sub-health "
     "level, so the chip gets no new work (PreSeparate) and running jobs continue."),
]

SWITCH_LISTS = [
    ("SeparateFaultCodes", "switch-separate", "Separate", "UnifiedBus switch fault, SeparateFault."),
    ("ResetFaultCodes", "switch-reset", "ResetDevice", "UnifiedBus switch fault, ResetFault."),
    ("RestartRequestFaultCodes", "switch-restart-request", "RestartJob",
     "UnifiedBus switch fault, RestartRequest."),
    ("SubHealthFaultCodes", "switch-sub-health", "PreSeparate",
     "UnifiedBus switch fault, SubHealthFault (no sub-health level in rebound: PreSeparate)."),
    ("NotHandleFaultCodes", "switch-not-handle", "Ignore", "UnifiedBus switch fault, NotHandleFault."),
]

# The level names the device plugin writes into its ConfigMap (fault_handling / fault_level).
# rebound's parser puts that name in the fault's reason, and a rule's codes also match the
# reason: these rules make rebound follow the plugin - including a site's customised
# faultCode.json and the plugin's own frequency/duration escalations - whenever it names a level.
PLUGIN_LEVEL_RULES = [
    ("plugin-says-separate", "Separate", ["SeparateNPU", "SeparateFault", "ManuallySeparateNPU"],
     "The device plugin reports the code at SeparateNPU, or isolated the chip after repeated faults "
     "(ManuallySeparateNPU, also the code of a chip listed in the ConfigMap's ManuallySeparateNPU key; it "
     "stays isolated until a person clears that key)."),
    ("plugin-says-reset", "ResetDevice", ["RestartNPU", "FreeRestartNPU"],
     "The device plugin reports the code at RestartNPU or FreeRestartNPU."),
    ("plugin-says-pre-separate", "PreSeparate", ["PreSeparateNPU", "PreSeparateFault", "SubHealthFault"],
     "The device plugin reports the code at PreSeparateNPU or SubHealthFault (no sub-health level in "
     "rebound)."),
    ("plugin-says-restart", "RestartJob", ["RestartBusiness", "RestartRequest", "RecoverRestartBusiness"],
     "The device plugin reports the code at RestartBusiness or RestartRequest."),
    ("plugin-says-not-handle", "Ignore", ["NotHandleFault", "NormalNPU", "NormalNetwork"],
     "The device plugin reports the code at NotHandleFault (or the chip as normal)."),
    ("unexplained-unhealthy", "PreSeparate", ["CardUnhealthy", "CardNetworkUnhealthy", "NodeUnhealthy"],
     "A chip in the plugin's -Unhealthy / -NetworkUnhealthy list with no fault code (older plugins), or a "
     "fault entry without codes: no new work on it (the plugin's default for network faults); running work "
     "continues, and fails through its own exit if the chip is really gone."),
]

STRATEGY_LEVEL = {"Separate": "Separate", "SubHealth": "PreSeparate"}
HANDLING_LEVEL = {"ManuallySeparateNPU": "Separate", "PreSeparateNPU": "PreSeparate", "SeparateNPU": "Separate"}

ASCEND_HEADER = """\
# GENERATED by tools/gen-samples.py from the shared Ascend data (ascend/faultCode.json,
# faultCustomization.json, faultDuration.json, relationFaultCustomization.json,
# SwitchFaultCode.json, ascend-codes.tsv). Edit the generator, then rerun it.
#
# Ascend NPU fault codes -> rebound level, exactly as the Ascend device plugin's
# faultCode.json levels them (mind-cluster), with the ClusterD level names
# mapped per DESIGN.md §2 (Level::from_clusterd):
#
#   SeparateNPU                      -> Separate
#   PreSeparateNPU                   -> PreSeparate
#   RestartNPU, FreeRestartNPU       -> ResetDevice
#   RestartBusiness, RestartRequest  -> RestartJob
#   NotHandleFault                   -> Ignore
#   SubHealthFault                   -> PreSeparate  (no sub-health level in rebound; see the rule)
#
# Rule order (the first match wins):
#  1. correlated-*: ClusterD's fault correlations (below), which the device
#     plugin does not apply itself.
#  2. plugin-says-*: the level the device plugin itself gives the code. The
#     plugin writes it into its ConfigMap (fault_handling, fault_level) and
#     rebound's parser passes it on as the fault's reason, which rule codes
#     also match. Following it keeps a site's customised faultCode.json and the
#     plugin's own frequency/duration escalations (ManuallySeparateNPU) in force,
#     as ClusterD does - it reads the levels from the same ConfigMap.
#  3. the faultCode.json lists, for faults that arrive without the plugin's
#     level (rebound's agent, a rebound.dev/fault Event, `rebound explain`), in
#     the device plugin's own lookup order (Separate, PreSeparate, RestartNPU,
#     FreeRestartNPU, RestartBusiness, RestartRequest, NotHandle, SubHealth), so
#     A2301001 (listed under both RestartBusiness and SeparateNPU) is Separate,
#     as the device plugin has it.
#  4. the UnifiedBus switch codes of SwitchFaultCode.json.
# Codes are hexadecimal and compared case-insensitively ("80e18402" and
# "0x80E18402" match "80E18402"). Beside each code: the cause from
# ascend-faultdiag's knowledge graph where it has one (186 of 802 codes).
#
# Frequency and duration (faultCustomization.json, the device plugin's defaults):
#   FaultFrequency  N times in TimeWindow -> ManuallySeparateNPU  => escalation to Separate
#   FaultDuration   lasting > FaultTimeout -> PreSeparateNPU      => escalation lastsFor, PreSeparate
# ReleaseTimeWindow / RecoverTimeout (how long until a manual separation or a
# duration fault is released) have no field in rebound: the node is released
# when its fault clears.
#
# Correlation (ClusterD relationFaultCustomization.json): a trigger code seen
# while the node carries a relation fault gets the relation's strategy. rebound
# expresses this with CEL over node.faults (the codes the node carries now).
# ClusterD's faultDuration.json (TimeOutInterval 300 s for 81078603 and the L2
# switch fault) is read here as the time a relation fault stays eligible for
# correlation; rebound has no such window - node.faults holds a fault until it clears.
#
# A code in no list and without the plugin's level gets defaultLevel
# PreSeparate: the device plugin derives the level of an unrecorded code from
# its severity, which rebound does not receive; an unknown hardware code takes
# the node out of scheduling without killing work.
"""


def gen_ascend(data):
    a = os.path.join(data, "ascend")
    with open(os.path.join(a, "faultCode.json")) as f:
        fc = json.load(f)
    with open(os.path.join(a, "faultCustomization.json")) as f:
        cust = json.load(f)
    with open(os.path.join(a, "SwitchFaultCode.json")) as f:
        sw = json.load(f)
    with open(os.path.join(a, "relationFaultCustomization.json")) as f:
        rel = json.load(f)
    with open(os.path.join(a, "faultDuration.json")) as f:
        dur = json.load(f)
    causes = {}
    with open(os.path.join(a, "ascend-codes.tsv"), newline="") as f:
        for r in csv.DictReader(f, delimiter="\t"):
            c = r["cause_en"].strip()
            extra = "/".join(x for x in (r["component"], r["module"]) if x)
            causes[r["code"].upper()] = f"{extra}: {c}" if extra else c
    unknown = set(fc) - {k for k, *_ in ASCEND_LISTS}
    if unknown:
        sys.exit(f"faultCode.json has lists with no level decided: {sorted(unknown)}")
    out = [ASCEND_HEADER]
    out.append("apiVersion: rebound.dev/v1alpha1\nkind: FaultClassification\nmetadata:\n  name: ascend-npu\n"
               "  labels:\n    app.kubernetes.io/part-of: rebound\nspec:\n  source: AscendNpu\n"
               "  priority: 100\n  defaultLevel: PreSeparate\n  rules:\n")
    # Correlation rules first: they raise NotHandle trigger codes when the node carries a
    # relation fault.
    by_trigger = OrderedDict()
    for r in rel:
        lvl = STRATEGY_LEVEL.get(r["FaultStrategy"])
        if lvl is None:
            sys.exit(f"relationFaultCustomization: no level for strategy {r['FaultStrategy']!r}")
        by_trigger.setdefault((r["FaultStrategy"], lvl), []).append((r["TriggerFault"], r["RelationFaults"]))
    # Stricter strategies first.
    order = {"Separate": 0, "PreSeparate": 1}
    for (strategy, lvl), pairs in sorted(by_trigger.items(), key=lambda kv: order[kv[0][1]]):
        # One rule per trigger set with the same relation faults.
        by_rel = OrderedDict()
        for trig, rels in pairs:
            by_rel.setdefault(tuple(rels), []).append(trig)
        for i, (rels, trigs) in enumerate(by_rel.items()):
            name = f"correlated-{strategy.lower()}" + (f"-{i + 1}" if len(by_rel) > 1 else "")
            cond = " || ".join(f"{ysq(r)} in node.faults" for r in rels)
            out.append(f"  - name: {name}\n    level: {lvl}\n")
            out.append("    description: >-\n" + wrap(
                f"ClusterD relationFaultCustomization: trigger {', '.join(trigs)} while the node carries "
                f"{' or '.join(rels)} -> FaultStrategy {strategy}.", "      ") + "\n")
            out.append(f"    when: {ysq(cond)}\n    codes:\n")
            for t in trigs:
                out.append(f"    - {yq(t)}\n")
    # The device plugin's own level for the code, carried as the fault's reason: follow it.
    for name, level, names, desc in PLUGIN_LEVEL_RULES:
        out.append(f"  - name: {name}\n    level: {level}\n")
        out.append("    description: >-\n" + wrap(desc, "      ") + "\n")
        out.append("    codes: [" + ", ".join(yq(n) for n in names) + "]\n")
    seen = {}
    for key, name, level, desc in ASCEND_LISTS:
        codes = fc.get(key, [])
        if not codes:
            continue
        out.append(f"  - name: {name}\n    level: {level}\n")
        out.append("    description: >-\n" + wrap(f"faultCode.json {key} ({len(codes)} codes). {desc}", "      ") + "\n")
        out.append("    codes:\n")
        done = set()
        for c in codes:
            cu = c.upper()
            note = ""
            if cu in done:
                continue  # B4060011 is listed twice in one list
            done.add(cu)
            if cu in seen:
                note = f"also in {seen[cu]}; the earlier rule ({seen[cu]}) wins, as in the device plugin"
            else:
                seen[cu] = key
            comment = "; ".join(x for x in (causes.get(cu, ""), note) if x)
            out.append(f"    - {yq(c)}" + (f"  # {comment}" if comment else "") + "\n")
    for key, name, level, desc in SWITCH_LISTS:
        codes = sw.get(key, [])
        if not codes:
            continue
        out.append(f"  - name: {name}\n    level: {level}\n")
        out.append("    description: >-\n" + wrap(
            f"SwitchFaultCode.json {key}. {desc} Switch codes are compared exactly as SwitchFaultCode.json "
            "writes them (case-insensitively), e.g. [0x00f1fef5,155913,npu,na].", "      ") + "\n")
        out.append("    codes:\n")
        for c in codes:
            out.append(f"    - {yq(c)}\n")
    unknown_sw = set(sw) - {k for k, *_ in SWITCH_LISTS}
    if unknown_sw:
        sys.exit(f"SwitchFaultCode.json has lists with no level decided: {sorted(unknown_sw)}")
    # Escalations.
    out.append("  escalations:\n")
    for i, ff in enumerate(cust.get("FaultFrequency", [])):
        lvl = HANDLING_LEVEL[ff["FaultHandling"]]
        hours = ff["TimeWindow"] // 3600
        within = f"{hours}h" if ff["TimeWindow"] % 3600 == 0 else f"{ff['TimeWindow']}s"
        extra = ""
        if "ReleaseTimeWindow" in ff:
            extra = f"; ReleaseTimeWindow {ff['ReleaseTimeWindow']} s is not expressible"
        out.append(f"  # faultCustomization.json FaultFrequency[{i}]: {ff['Times']} times in "
                   f"{ff['TimeWindow']} s -> {ff['FaultHandling']}{extra}\n")
        out.append(f"  - name: frequency-{i + 1}\n    codes:\n")
        for c in ff["EventId"]:
            out.append(f"    - {yq(c)}\n")
        out.append(f"    times: {ff['Times']}\n    within: {within}\n    level: {lvl}\n")
    for i, fd in enumerate(cust.get("FaultDuration", [])):
        lvl = HANDLING_LEVEL[fd["FaultHandling"]]
        out.append(f"  # faultCustomization.json FaultDuration[{i}]: lasting over {fd['FaultTimeout']} s -> "
                   f"{fd['FaultHandling']} (RecoverTimeout {fd['RecoverTimeout']} s is not expressible)\n")
        out.append(f"  - name: duration-{i + 1}\n    codes: [" + ", ".join(yq(c) for c in fd["EventId"]) + "]\n")
        out.append(f"    lastsFor: {fd['FaultTimeout']}s\n    level: {lvl}\n")
    n_codes = len({c.upper() for v in fc.values() for c in v})
    return "".join(out), n_codes, dur


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("REBOUND_FAULT_DATA",
                                                     os.path.join(REPO, "..", "shared", "data", "faults")))
    ap.add_argument("--out", default=os.path.join(REPO, "samples", "classifications"))
    a = ap.parse_args()
    if not os.path.isfile(os.path.join(a.data, "xid-catalog.tsv")):
        sys.exit(f"no fault data at {a.data}; pass --data or set REBOUND_FAULT_DATA")
    os.makedirs(a.out, exist_ok=True)
    xid, n_xid = gen_xid(a.data)
    with open(os.path.join(a.out, "nvidia-xid.yaml"), "w") as f:
        f.write(xid)
    asc, n_asc, _ = gen_ascend(a.data)
    with open(os.path.join(a.out, "ascend-npu.yaml"), "w") as f:
        f.write(asc)
    print(f"wrote nvidia-xid.yaml ({n_xid} XIDs) and ascend-npu.yaml ({n_asc} codes) to {a.out}")


if __name__ == "__main__":
    main()
