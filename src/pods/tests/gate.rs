//! Table tests of `start_gate`: what holds a container back before its create, in order.

use crate::node::runtime::devices::DeviceOptions;
use crate::pods::actions::{start_gate, Gate};
use crate::pods::DevicePrep;

/// One row: what is known of a container, and the gate it meets.
struct Case<'a> {
    what: &'a str,
    refusal: Option<&'a str>,
    image_ready: Option<bool>,
    devices: Option<&'a DevicePrep>,
    want: Gate,
}

#[test]
fn the_config_then_the_image_then_the_devices_hold_a_container_back() {
    let ready = DevicePrep::Ready(DeviceOptions::default());
    let failed = DevicePrep::Failed("no GPU".into());
    let requested = DevicePrep::Requested;
    let why = "hostIPC is not supported";
    let refused = || Gate::ConfigError(why.into());
    let case = |what, refusal, image_ready, devices, want| Case { what, refusal, image_ready, devices, want };
    let cases = [
        case("a refused field wins before the image is looked at", Some(why), None, None, refused()),
        case("a refused field wins over failed devices", Some(why), None, Some(&failed), refused()),
        case("a refused field wins over a ready image", Some(why), Some(true), Some(&ready), refused()),
        case("the image is looked at first", None, None, None, Gate::CheckImage),
        case("the image is looked at before devices are used", None, None, Some(&ready), Gate::CheckImage),
        case("an image not there holds it", None, Some(false), None, Gate::WaitForImage),
        case(
            "an image not there holds it before devices fail it",
            None,
            Some(false),
            Some(&failed),
            Gate::WaitForImage,
        ),
        case("devices being prepared hold it", None, Some(true), Some(&requested), Gate::WaitForDevices),
        case(
            "devices that cannot be prepared fail it",
            None,
            Some(true),
            Some(&failed),
            Gate::DevicesFailed("no GPU".into()),
        ),
        case("prepared devices let it be created", None, Some(true), Some(&ready), Gate::Create),
        case("a container asking for no devices is created", None, Some(true), None, Gate::Create),
    ];
    for c in cases {
        assert_eq!(start_gate(c.refusal, c.image_ready, c.devices), c.want, "{}", c.what);
    }
}
