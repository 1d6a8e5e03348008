//! Any bytes through the kernel-log parser, the incident decoder and the
//! bounded line reader: no panic, no unbounded growth.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rebound::agent::kmsg;
use rebound::agent::pci::DeviceMap;
use rebound::agent::xid::KmsgScanner;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = kmsg::parse_line(&text);
    let _ = kmsg::split_record(&text);
    let mut scanner = KmsgScanner::new(DeviceMap::default());
    for line in text.lines() {
        let _ = scanner.push(line);
    }
    let mut scanner = KmsgScanner::new(DeviceMap::default());
    if let Ok(found) = scanner.scan(data) {
        assert!(found.len() as u64 <= scanner.lines);
    }
});
