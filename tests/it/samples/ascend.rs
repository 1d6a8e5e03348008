//! The Ascend samples: fault codes get the level faultCode.json gives them,
//! and a lasting or repeating code escalates.

use super::*;

// --- Ascend --------------------------------------------------------------------------------

/// The device plugin's lookup order (first list wins for a code listed twice).
const ASCEND_ORDER: [&str; 8] = [
    "SeparateNPUCodes",
    "PreSeparateNPUCodes",
    "RestartNPUCodes",
    "FreeRestartNPUCodes",
    "RestartBusinessCodes",
    "RestartRequestCodes",
    "NotHandleFaultCodes",
    "SubHealthFaultCodes",
];

fn ascend_expected(list: &str) -> Level {
    // SubHealth has no rebound level: the sample maps it to PreSeparate.
    Level::from_clusterd(list).unwrap_or(Level::PreSeparate)
}

#[test]
fn samples_ascend_80e18402_gets_its_faultcode_json_level() {
    let d = decide(
        &mut engine(),
        "source=AscendNpu,code=80e18402,node=npu-1,device=4",
        Some(OPTED_IN_LLM),
        1,
        Utc::now(),
    );
    assert!(d.rule.starts_with("ascend-npu/"), "rule {}", d.rule);
    let Some(text) = read_data(FAULT_CODE_JSON) else {
        return;
    };
    let json: serde_json::Value = serde_json::from_str(&text).expect("faultCode.json is JSON");
    let list = ASCEND_ORDER
        .iter()
        .find(|l| {
            json[**l].as_array().is_some_and(|a| {
                a.iter().any(|c| {
                    c.as_str()
                        .is_some_and(|c| c.eq_ignore_ascii_case("80E18402"))
                })
            })
        })
        .expect("80E18402 is in faultCode.json");
    assert_eq!(d.level, ascend_expected(list), "80E18402 is in {list}");
    if d.level.restarts_jobs() {
        assert!(job_restarts_whole_job(&d), "{:?}", d.jobs);
    }
}

#[test]
fn samples_every_ascend_code_gets_its_faultcode_json_level() {
    let Some(text) = read_data(FAULT_CODE_JSON) else {
        return;
    };
    let json: serde_json::Value = serde_json::from_str(&text).expect("faultCode.json is JSON");
    let mut expected: BTreeMap<String, (Level, &str)> = BTreeMap::new();
    for list in ASCEND_ORDER {
        for c in json[list].as_array().into_iter().flatten() {
            let code = c.as_str().expect("codes are strings").to_ascii_uppercase();
            expected
                .entry(code)
                .or_insert((ascend_expected(list), list));
        }
    }
    assert!(expected.len() >= 800, "codes: {}", expected.len());
    let mut e = engine();
    let now = Utc::now();
    let mut problems = Vec::new();
    for (i, (code, (level, list))) in expected.iter().enumerate() {
        let f = parse_fault(
            &format!("source=AscendNpu,code={code},node=npu-{i},device=0"),
            now,
        )
        .unwrap();
        let c = e.classifier.classify(f, None, now);
        if c.level != *level || c.rule.ends_with("/defaultLevel") {
            problems.push(format!("{code} ({list}): {} by {}", c.level, c.rule));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn samples_ascend_81078603_escalates_when_it_lasts_or_repeats() {
    // NotHandleFault at first; lasting over 20 s -> PreSeparate; 5 times a day -> Separate.
    assert_eq!(
        classify_once("source=AscendNpu,code=81078603,node=npu-1,device=0").level,
        Level::Ignore
    );
    let lasting = decide(
        &mut engine(),
        "source=AscendNpu,code=81078603,node=npu-1,device=0",
        None,
        2,
        Utc::now(),
    );
    assert_eq!(
        lasting.level,
        Level::PreSeparate,
        "seen one minute apart: lasted over 20 s"
    );
    let repeated = decide(
        &mut engine(),
        "source=AscendNpu,code=81078603,node=npu-1,device=0",
        None,
        5,
        Utc::now(),
    );
    assert_eq!(repeated.level, Level::Separate);
}
