//! The Ascend fault view at scale: 2,500 nodes' device-plugin ConfigMaps
//! sharded within the ConfigMap size bound, and the surplus shards deleted
//! when most nodes go.

use super::ascend_view::*;
use super::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, PostParams};
use rebound_sim::actors::ascend::{self as plugin, AscendFault};
use std::collections::BTreeMap;

/// 2,500 nodes' device-plugin ConfigMaps (created directly: running 2,500
/// simulated kubelets is not needed to test the view), with realistic
/// faults: shards within 800 KiB, every node in exactly one; then most
/// nodes go and the surplus shards are deleted.
async fn twenty_five_hundred_nodes_shard_within_the_bound(server: Server) {
    let (bed, ctl) = ascend_bed(server, 2).await;
    let started = Instant::now();
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), plugin::NAMESPACE);
    // Named with the bed's node prefix, so a shared bed's clean-up finds them.
    let prefix = bed.node_prefix();
    let names: Vec<String> = (0..2500).map(|i| format!("{prefix}big-{i:04}")).collect();
    futures::stream::iter(names.iter().enumerate())
        .map(|(i, n)| {
            let api = api.clone();
            async move {
                // Most nodes carry lingering NotHandleFault codes on up to
                // three chips; one in fifty has a chip to separate.
                let mut faults: Vec<AscendFault> = (0..(i % 4) as u32)
                    .map(|chip| AscendFault {
                        chip,
                        codes: vec!["80C98009".into(), "8C1F8609".into(), "81078603".into()],
                        level: "NotHandleFault".into(),
                        fault_type: "CardUnhealthy".into(),
                    })
                    .collect();
                if i % 50 == 0 {
                    faults.push(AscendFault {
                        chip: 7,
                        codes: vec!["80E18402".into()],
                        level: "SeparateNPU".into(),
                        fault_type: "CardUnhealthy".into(),
                    });
                }
                api.create(&PostParams::default(), &plugin::configmap(n, 8, &faults))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let mut all = names.clone();
    all.extend(bed.cluster.node_names());
    let check = |cms: &BTreeMap<String, ConfigMap>, expect: &[String]| -> Option<usize> {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut shards = 0;
        for (name, cm) in cms
            .iter()
            .filter(|(n, _)| n.starts_with("cluster-info-device-"))
        {
            shards += 1;
            let bytes: usize = cm
                .data
                .as_ref()?
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum();
            assert!(bytes <= BOUND, "{name}: {bytes} bytes");
            // Only this bed's nodes: a shared control plane may hold
            // others (the real node of the real-kubelet tests, a real
            // cluster's own).
            for k in value_of(cm)
                .as_object()?
                .keys()
                .filter(|k| k.contains(prefix.as_str()))
            {
                *seen
                    .entry(k.trim_start_matches("mindx-dl-deviceinfo-").to_string())
                    .or_default() += 1;
            }
        }
        assert!(seen.values().all(|c| *c == 1), "a node in two shards");
        (seen.len() == expect.len() && expect.iter().all(|n| seen.contains_key(n)))
            .then_some(shards)
    };
    let node_count = |cms: &BTreeMap<String, ConfigMap>| {
        cms.get("cluster-info-node-cm").map(value_of).and_then(|v| {
            v.as_object()
                .map(|o| o.keys().filter(|k| k.contains(prefix.as_str())).count())
        })
    };
    let shards = wait(
        "2,502 nodes in the view",
        Duration::from_secs(60),
        || async {
            let cms = view_cms(&bed, VIEW_NS).await;
            let shards = check(&cms, &all)?;
            (node_count(&cms) == Some(2502)).then_some(shards)
        },
    )
    .await;
    assert!(shards >= 3, "{shards} shards for 2,502 nodes");
    let cms = view_cms(&bed, VIEW_NS).await;
    let node_cm = value_of(&cms["cluster-info-node-cm"]);
    let ours = || {
        node_cm
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.contains(prefix.as_str()))
    };
    assert_eq!(ours().count(), 2502);
    let unhealthy: Vec<&String> = ours()
        .filter(|(_, e)| e["NodeStatus"] == "UnHealthy")
        .map(|(k, _)| k)
        .collect();
    assert_eq!(unhealthy.len(), 50, "the nodes with a chip to separate");
    assert!(unhealthy.contains(&&format!("mindx-dl-nodeinfo-{prefix}big-0050")));
    // 2,000 nodes go: their entries go, and so do the emptied shards.
    futures::stream::iter(names.iter().take(2000))
        .map(|n| {
            let api = api.clone();
            async move {
                api.delete(&plugin::configmap_name(n), &DeleteParams::default())
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let rest: Vec<String> = all.iter().skip(2000).cloned().collect();
    let left = wait("502 nodes in the view", Duration::from_secs(60), || async {
        let cms = view_cms(&bed, VIEW_NS).await;
        let shards = check(&cms, &rest)?;
        (node_count(&cms) == Some(502)).then_some(shards)
    })
    .await;
    assert!(left < shards, "{left} shards left of {shards}");
    assert!(
        view_writes(&bed, VIEW_NS)
            .iter()
            .any(|r| r.verb == "delete"),
        "a surplus shard was deleted"
    );
    assert_granted(&bed);
    eprintln!("2,500-node view test took {:?}", started.elapsed());
    ctl.shutdown().await;
}

e2e!(twenty_five_hundred_nodes_shard_within_the_bound);
