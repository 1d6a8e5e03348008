fn main() {
    print!("{}", rebound::api::crds_yaml().unwrap());
}
