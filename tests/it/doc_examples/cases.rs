//! One case per example of the docs (tests/it/doc_examples.rs): the
//! example's exact text, what runs it, and why it cannot run here when it
//! cannot. Add a case when a document gains an example; the coverage test
//! prints the text to paste.

use super::{cel, commands};

/// How a case is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A CEL example, run through `rebound explain`.
    Cel,
    /// A command or file example, run.
    Run,
    /// A command that cannot run here (a cluster, Docker, the suite
    /// itself, hours): checked offline; [`Case::why`] says why.
    Offline,
}

pub struct Case {
    pub doc: &'static str,
    pub example: &'static str,
    pub kind: Kind,
    pub check: fn(&str),
    /// Why an offline case is not run.
    pub why: Option<&'static str>,
}

fn case(
    doc: &'static str,
    example: &'static str,
    kind: Kind,
    check: fn(&str),
    why: Option<&'static str>,
) -> Case {
    assert_eq!(
        kind == Kind::Offline,
        why.is_some(),
        "{doc}: an offline case says why, a run one does not"
    );
    Case {
        doc,
        example,
        kind,
        check,
        why,
    }
}

/// Every case.
pub fn all() -> Vec<Case> {
    use Kind::*;
    vec![
        case(
            "README.md",
            r##"cargo run --release -- demo"##,
            Run,
            commands::demo,
            None,
        ),
        case(
            "README.md",
            r##"cargo run -- explain -f samples/ \
  --fault source=NvidiaXid,code=79,node=gpu-7,device=3 \
  --job kind=PyTorchJob,name=llm,namespace=team-a,labels.kcover.io/cascading-recovery=true"##,
            Run,
            commands::explain_xid79,
            None,
        ),
        case(
            "README.md",
            r##"spec:
  restart:
    tiers: [InPlace, ReplaceFaulty, Recreate]   # default: [Recreate]
    fallbackAfter: 2m"##,
            Run,
            commands::tiers_fragment,
            None,
        ),
        case(
            "README.md",
            r##"kubectl apply -k config/default          # CRDs, RBAC, controller (2 replicas), agent DaemonSet"##,
            Offline,
            commands::apply_k,
            Some(r##"needs a cluster: what it applies is rendered and checked"##),
        ),
        case(
            "README.md",
            r##"helm install rebound chart/rebound --namespace rebound-system --create-namespace \
  --set image.repository=registry.example.com/rebound"##,
            Offline,
            commands::helm_install,
            Some(r##"needs a cluster: `helm template` renders the same"##),
        ),
        case(
            "README.md",
            r##"kubectl apply -f samples/classifications/ -f samples/policies/cluster-default.yaml
kubectl get rp,fc -A"##,
            Offline,
            commands::apply_samples,
            Some(r##"needs a cluster: the files are loaded and compiled"##),
        ),
        case(
            "README.md",
            r##"cargo test --locked"##,
            Offline,
            commands::the_suite,
            Some(r##"the test suite itself"##),
        ),
        case(
            "README.md",
            r##"cargo test --test it e2e                                             # both servers
cargo test --test it e2e:: -- --skip ::real                          # the embedded server alone
REBOUND_E2E_KUBECONFIG=/tmp/kind.kubeconfig cargo test --test it e2e:: -- --skip ::embedded   # kind instead"##,
            Offline,
            commands::the_suite,
            Some(r##"the test suite itself"##),
        ),
        case(
            "docs/getting-started.md",
            r##"cargo run --release -- demo"##,
            Run,
            commands::demo,
            None,
        ),
        case(
            "docs/getting-started.md",
            r##"cargo run --release -- demo --serve"##,
            Offline,
            commands::cargo_run_parses,
            Some(r##"serves until Ctrl-C: its flags are checked"##),
        ),
        case(
            "docs/getting-started.md",
            r##"export KUBECONFIG=$PWD/rebound-demo.kubeconfig
kubectl get nodes                       # separated nodes show SchedulingDisabled
kubectl get rp -A                       # policies: Ready, Recoveries, Last
kubectl get fc                          # classifications
kubectl get events -A --field-selector reportingComponent=rebound-controller
kubectl get pytorchjobs -A -o yaml | grep rebound.dev/   # restart history annotations"##,
            Offline,
            commands::kubectl_on_the_demo,
            Some(r##"needs `demo --serve`'s server"##),
        ),
        case(
            "docs/getting-started.md",
            r##"cargo run -- explain -f samples/ \
  --fault source=NvidiaXid,code=79,node=gpu-7,device=3 \
  --job kind=PyTorchJob,name=llm,namespace=team-a,labels.kcover.io/cascading-recovery=true"##,
            Run,
            commands::explain_xid79,
            None,
        ),
        case(
            "docs/getting-started.md",
            r##"docker build -t registry.example.com/rebound:0.1.0 .
docker push registry.example.com/rebound:0.1.0
docker build --target agent -t registry.example.com/rebound-agent:0.1.0 .
docker push registry.example.com/rebound-agent:0.1.0"##,
            Offline,
            commands::docker,
            Some(r##"needs Docker"##),
        ),
        case(
            "docs/getting-started.md",
            r##"kubectl apply -k config/default"##,
            Offline,
            commands::apply_k,
            Some(r##"needs a cluster: what it applies is rendered and checked"##),
        ),
        case(
            "docs/getting-started.md",
            r##"kubectl apply -k config/with-admission-policy   # config/default and the admission policy"##,
            Offline,
            commands::apply_k,
            Some(r##"needs a cluster: what it applies is rendered and checked"##),
        ),
        case(
            "docs/getting-started.md",
            r##"helm install rebound chart/rebound --namespace rebound-system --create-namespace \
  --set image.repository=registry.example.com/rebound"##,
            Offline,
            commands::helm_install,
            Some(r##"needs a cluster: `helm template` renders the same"##),
        ),
        case(
            "docs/getting-started.md",
            r##"helm template rebound chart/rebound --namespace rebound-system \
  --api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy   # the admission policy"##,
            Run,
            commands::install_admission,
            None,
        ),
        case(
            "docs/getting-started.md",
            r##"kubectl apply --server-side -f crds/"##,
            Offline,
            commands::apply_crds,
            Some(r##"needs a cluster"##),
        ),
        case(
            "docs/getting-started.md",
            r##"kubectl apply -f samples/classifications/
kubectl apply -f samples/policies/cluster-default.yaml"##,
            Offline,
            commands::apply_samples,
            Some(r##"needs a cluster: the files are loaded and compiled"##),
        ),
        case(
            "docs/getting-started.md",
            r##"kubectl label pytorchjob my-training kcover.io/cascading-recovery=true"##,
            Offline,
            commands::label_opt_in,
            Some(r##"needs a cluster"##),
        ),
        case(
            "docs/getting-started.md",
            r##"kubectl -n rebound-system get pods
kubectl -n rebound-system get lease rebound-controller   # Helm: <fullname>-controller, rebound-controller for release rebound
kubectl get rp -A
kubectl get events -A --field-selector reportingComponent=rebound-controller"##,
            Offline,
            commands::check_it,
            Some(r##"needs a cluster: the names are checked"##),
        ),
        case(
            "docs/cel.md",
            r##"job.restarts < 3 ? duration("30s") : job.restarts < 10 ? duration("2m") : duration("10m")"##,
            Cel,
            cel::growing_cooldown,
            None,
        ),
        case(
            "docs/cel.md",
            r##"job.restarts < 20 && !("rebound.dev/pause" in job.annotations && job.annotations["rebound.dev/pause"] == "true")"##,
            Cel,
            cel::restarts_and_pause_gate,
            None,
        ),
        case(
            "docs/cel.md",
            r##"fault.source != "NvidiaXid" || fault.code in ["13", "31", "43", "45", "79"]"##,
            Cel,
            cel::some_xids,
            None,
        ),
        case(
            "docs/cel.md",
            r##"fault.source == "PodExit" && fault.exitCode != 0 && fault.reason != "OOMKilled""##,
            Cel,
            cel::own_exits_only,
            None,
        ),
        case(
            "docs/concepts.md",
            r##"now - fault.firstSeen"##,
            Cel,
            cel::fault_age,
            None,
        ),
        case(
            "docs/cel.md",
            r##"now.getDayOfWeek() != 0 && now.getDayOfWeek() != 6"##,
            Cel,
            cel::weekdays,
            None,
        ),
        case(
            "docs/cel.md",
            r##"!job.namespace.startsWith("inference-")"##,
            Cel,
            cel::not_inference,
            None,
        ),
        case(
            "docs/cel.md",
            r##"!(node.level in ["ResetDevice", "Separate"] && now - job.lastRestart < duration("10m"))"##,
            Cel,
            cel::faulty_node_gate,
            None,
        ),
        case(
            "docs/cel.md",
            r##"fault.code == "74" && fault.count >= 3"##,
            Cel,
            cel::nvlink_escalation,
            None,
        ),
        case(
            "docs/cel.md",
            r##"job.replicas >= 64 ? duration("5m") : duration("30s")"##,
            Cel,
            cel::large_jobs_cooldown,
            None,
        ),
        case(
            "samples/README.md",
            r##"python3 tools/gen-samples.py            # data from ../shared/data/faults or $REBOUND_FAULT_DATA"##,
            Offline,
            commands::gen_samples,
            Some(r##"rewrites the samples from ../shared"##),
        ),
        case(
            "samples/README.md",
            r##"kubectl apply -f samples/classifications/ -f samples/policies/"##,
            Offline,
            commands::apply_samples,
            Some(r##"needs a cluster: the files are loaded and compiled"##),
        ),
        case(
            "samples/README.md",
            r##"rebound explain -f samples/ \
  --fault source=NvidiaXid,code=79,node=gpu-7,device=0 \
  --job kind=PyTorchJob,name=llm,namespace=team-a,labels.kcover.io/cascading-recovery=true"##,
            Run,
            commands::samples_explain,
            None,
        ),
        case(
            "samples/README.md",
            r##"level:    Separate  (rule nvidia-xid/node-reboot-required)
node:     gpu-7: cordon + taint rebound.dev/separated:NoSchedule  [node settings: rebound-system/cluster-default]
job:      PyTorchJob/team-a/llm: restart job
          policy team-a/llm-training"##,
            Run,
            commands::samples_explain_output,
            None,
        ),
        case(
            "samples/README.md",
            r##"apiVersion: rebound.dev/v1alpha1
kind: FaultClassification
metadata:
  name: nvidia-xid-site
spec:
  source: NvidiaXid
  priority: 200            # above the shipped 100
  rules:
  - name: xid13-is-hardware-here
    codes: ["13"]
    level: Separate
    description: Our GPUs only raise 13 when they are dying (ticket OPS-123).
  # no defaultLevel: unknown codes keep the shipped default
---
apiVersion: rebound.dev/v1alpha1
kind: FaultClassification
metadata:
  name: pod-exit-site
spec:
  source: PodExit
  priority: 200
  rules:
  - name: usage-error
    codes: ["2"]
    level: Ignore"##,
            Run,
            commands::override_classifications,
            None,
        ),
        case(
            "README.md",
            r##"cargo run -- demo --serve"##,
            Offline,
            commands::cargo_run_parses,
            Some(r##"serves until Ctrl-C: its flags are checked"##),
        ),
        case(
            "docs/getting-started.md",
            r##"rebound sim --scenario resume"##,
            Offline,
            commands::rebound_flags,
            Some(r##"minutes: its flags are checked"##),
        ),
        case(
            "docs/cel.md",
            r##"rebound explain --node labels.K=V,level=L,faults=A;B"##,
            Run,
            commands::rebound_flags,
            None,
        ),
        case(
            "docs/concepts.md",
            r##"rebound explain -f samples/ --fault source=NvidiaXid,code=79,node=gpu-7 --job kind=PyTorchJob,name=llm,namespace=team-a,labels.kcover.io/cascading-recovery=true"##,
            Run,
            commands::explain_prints_everything,
            None,
        ),
        case(
            "docs/cel.md",
            r##"duration("5m")"##,
            Cel,
            cel::constant_duration,
            None,
        ),
        case(
            "docs/cel.md",
            r##"job.restartz"##,
            Cel,
            cel::unknown_field,
            None,
        ),
        case(
            "docs/cel.md",
            r##"fault.code == "79""##,
            Cel,
            cel::code_is_a_string,
            None,
        ),
        case(
            "docs/cel.md",
            r##"int(fault.code) >= 140"##,
            Cel,
            cel::decimal_range,
            None,
        ),
        case(
            "docs/cel.md",
            r##"node.name == "gpu-7""##,
            Cel,
            cel::node_of_the_fault,
            None,
        ),
        case(
            "docs/cel.md",
            r##"node.level == "Separate""##,
            Cel,
            cel::node_of_the_fault,
            None,
        ),
        case(
            "docs/cel.md",
            r##""79" in node.faults"##,
            Cel,
            cel::node_of_the_fault,
            None,
        ),
        case(
            "docs/cel.md",
            r##"duration("1h30m")"##,
            Cel,
            cel::constant_duration,
            None,
        ),
        case(
            "docs/cel.md",
            r##"timestamp("2026-11-30T10:00:00Z")"##,
            Cel,
            cel::timestamp_literal,
            None,
        ),
        case(
            "docs/cel.md",
            r##"job.restarts + 1"##,
            Cel,
            cel::ints_without_suffixes,
            None,
        ),
        case(
            "docs/cel.md",
            r##"fault.exitCode == 137"##,
            Cel,
            cel::ints_without_suffixes,
            None,
        ),
        case(
            "docs/cel.md",
            r##""team" in job.labels && job.labels["team"] == "llm""##,
            Cel,
            cel::guarded_lookup,
            None,
        ),
        case(
            "docs/cel.md",
            r##"'1 == 2'"##,
            Cel,
            cel::quoted_constant,
            None,
        ),
        case(
            "docs/cel.md",
            r##"'duration("5m")'"##,
            Cel,
            cel::quoted_constant,
            None,
        ),
    ]
}
