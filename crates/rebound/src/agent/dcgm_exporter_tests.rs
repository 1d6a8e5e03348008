//! Tests of the dcgm-exporter source on an exposition in the exporter's
//! format (HELP/TYPE lines, the label set recent dcgm-exporter releases
//! print: gpu, UUID, pci_bus_id, device, modelName, Hostname,
//! DCGM_FI_DRIVER_VERSION, err_code/err_msg on the XID gauge; MIG
//! instances repeat a GPU's line with GPU_I_PROFILE/GPU_I_ID). Written for
//! the test, not captured from a node: no capture is in the shared data.

use super::*;

fn exposition(xid0: u32, dbe1: u32, remap_fail1: u32, pending1: u32) -> String {
    let l = |gpu: u32, extra: &str| {
        format!(
            "{{gpu=\"{gpu}\",UUID=\"GPU-0f0e0d0c-0000-1111-2222-33334444555{gpu}\",pci_bus_id=\"00000000:{:02X}:00.0\",device=\"nvidia{gpu}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"gpu-node-7\",DCGM_FI_DRIVER_VERSION=\"550.54.15\"{extra}}}",
            0x18 + gpu * 0x20
        )
    };
    format!(
        "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n\
         # TYPE DCGM_FI_DEV_SM_CLOCK gauge\n\
         DCGM_FI_DEV_SM_CLOCK{g0} 1980\n\
         DCGM_FI_DEV_SM_CLOCK{g1} 1980\n\
         # HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n\
         # TYPE DCGM_FI_DEV_XID_ERRORS gauge\n\
         DCGM_FI_DEV_XID_ERRORS{x0} {xid0}\n\
         DCGM_FI_DEV_XID_ERRORS{x0mig} {xid0}\n\
         DCGM_FI_DEV_XID_ERRORS{x1} 0\n\
         # HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Total number of double-bit volatile ECC errors.\n\
         # TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n\
         DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{g0} 0\n\
         DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{g1} {dbe1}\n\
         # HELP DCGM_FI_DEV_RETIRED_PENDING Total number of pages pending retirement.\n\
         # TYPE DCGM_FI_DEV_RETIRED_PENDING counter\n\
         DCGM_FI_DEV_RETIRED_PENDING{g1} {pending1}\n\
         # HELP DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS Number of remapped rows for uncorrectable errors\n\
         # TYPE DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS counter\n\
         DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{g1} 3\n\
         # HELP DCGM_FI_DEV_ROW_REMAP_FAILURE Whether remapping of rows has failed\n\
         # TYPE DCGM_FI_DEV_ROW_REMAP_FAILURE gauge\n\
         DCGM_FI_DEV_ROW_REMAP_FAILURE{g0} 0\n\
         DCGM_FI_DEV_ROW_REMAP_FAILURE{g1} {remap_fail1}\n",
        g0 = l(0, ""),
        g1 = l(1, ""),
        x0 = l(
            0,
            &format!(",err_code=\"{xid0}\",err_msg=\"Graphics Engine Exception\"")
        ),
        x0mig = l(0, ",GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"2\""),
        x1 = l(1, ",err_code=\"0\",err_msg=\"No Error\""),
    )
}

fn codes(f: &[AgentFault]) -> Vec<(&str, &str, Option<&str>)> {
    f.iter()
        .map(|f| (f.source, f.code.as_str(), f.device.as_deref()))
        .collect()
}

#[test]
fn parses_the_fields_it_reads_and_skips_the_rest() {
    let (samples, errors) = parse_exposition(&exposition(13, 2, 1, 4));
    assert_eq!(errors, 0);
    let got: Vec<(&str, Option<&str>, f64)> = samples
        .iter()
        .map(|s| (s.name.as_str(), s.gpu.as_deref(), s.value))
        .collect();
    assert_eq!(
        got,
        [
            ("DCGM_FI_DEV_XID_ERRORS", Some("0"), 13.0),
            ("DCGM_FI_DEV_XID_ERRORS", Some("0"), 13.0),
            ("DCGM_FI_DEV_XID_ERRORS", Some("1"), 0.0),
            ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", Some("0"), 0.0),
            ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", Some("1"), 2.0),
            ("DCGM_FI_DEV_RETIRED_PENDING", Some("1"), 4.0),
            ("DCGM_FI_DEV_ROW_REMAP_FAILURE", Some("0"), 0.0),
            ("DCGM_FI_DEV_ROW_REMAP_FAILURE", Some("1"), 1.0),
        ]
    );
}

#[test]
fn label_values_with_escapes_and_broken_lines() {
    let text = "DCGM_FI_DEV_XID_ERRORS{err_msg=\"a \\\"quoted\\\" } brace\",gpu=\"3\"} 48 1700000000000\n\
                DCGM_FI_DEV_XID_ERRORS{gpu=\"4\" 48\n\
                DCGM_FI_DEV_XID_ERRORS{gpu=\"5\"} not-a-number\n\
                DCGM_FI_DEV_ROW_REMAP_FAILURE 1\n";
    let (samples, errors) = parse_exposition(text);
    assert_eq!(errors, 2);
    assert_eq!(samples[0].gpu.as_deref(), Some("3"));
    assert_eq!(samples[0].value, 48.0);
    assert_eq!((samples[1].gpu.as_deref(), samples[1].value), (None, 1.0));
}

#[test]
fn faults_of_a_scrape_and_the_xid_gauge_needs_a_change() {
    let mut st = ExporterState::default();
    let (first, _) = parse_exposition(&exposition(13, 2, 1, 4));
    // The first scrape: the standing XID 13 is old news; the counters are state.
    assert_eq!(
        codes(&st.faults(&first)),
        [
            ("NodeCondition", "nvml-ecc-uncorrected", Some("1")),
            ("NodeCondition", "nvml-retired-pages-pending", Some("1")),
            ("NodeCondition", "nvml-row-remap-failure", Some("1")),
        ]
    );
    // The same XID again: nothing new; a new one, once (the MIG line repeats it).
    let (same, _) = parse_exposition(&exposition(13, 0, 0, 0));
    assert!(st.faults(&same).is_empty());
    let (new, _) = parse_exposition(&exposition(79, 0, 0, 0));
    let f = st.faults(&new);
    assert_eq!(codes(&f), [("NvidiaXid", "79", Some("0"))]);
    assert_eq!(f[0].reason, "GpuXid");
    assert!(st.faults(&new).is_empty(), "reported once");
    // Cleared to 0 and back to the same value: a new XID.
    let (zero, _) = parse_exposition(&exposition(0, 0, 0, 0));
    assert!(st.faults(&zero).is_empty());
    assert_eq!(codes(&st.faults(&new)), [("NvidiaXid", "79", Some("0"))]);
}

#[tokio::test]
async fn scrape_reads_a_chunked_answer_and_names_a_missing_exporter() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let body = exposition(48, 0, 0, 0);
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let mut req = vec![0u8; 4096];
        let n = s.read(&mut req).await.expect("request");
        let head = String::from_utf8_lossy(&req[..n]).to_string();
        let mut resp = String::from(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
        for chunk in body.as_bytes().chunks(700) {
            resp.push_str(&format!("{:x}\r\n", chunk.len()));
            resp.push_str(std::str::from_utf8(chunk).expect("ascii"));
            resp.push_str("\r\n");
        }
        resp.push_str("0\r\n\r\n");
        s.write_all(resp.as_bytes()).await.expect("answer");
        head
    });
    let url = format!("http://{addr}/metrics");
    let text = scrape(&url, Duration::from_secs(5)).await.expect("scrape");
    let head = server.await.expect("server");
    assert!(head.starts_with("GET /metrics HTTP/1.1\r\n"), "{head}");
    let (samples, errors) = parse_exposition(&text);
    assert_eq!((samples.len(), errors), (8, 0));

    // Nothing listening there any more.
    let err = scrape(&url, Duration::from_secs(5))
        .await
        .expect_err("no exporter");
    assert!(matches!(err, ExporterError::Connect { .. }), "{err}");
    assert!(matches!(
        scrape("https://127.0.0.1:9400/metrics", Duration::from_secs(1)).await,
        Err(ExporterError::Url { .. })
    ));
}
