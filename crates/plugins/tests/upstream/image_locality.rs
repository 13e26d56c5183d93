//! `plugins/imagelocality/image_locality_test.go`.

use rkube_framework::MAX_NODE_SCORE;
use rkube_model::Node;
use rkube_plugins::image_locality::{normalized_image_name, ImageLocality};

use crate::common::*;

type Images = &'static [(&'static [&'static str], i64)];

const NODE_40_300_2000: Images = &[
    (
        &["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"],
        40 * MB,
    ),
    (&["gcr.io/300:latest", "gcr.io/300:v1"], 300 * MB),
    (&["gcr.io/2000:latest"], 2000 * MB),
];
const NODE_250_10: Images = &[
    (&["gcr.io/250:latest"], 250 * MB),
    (&["gcr.io/10:latest", "gcr.io/10:v1"], 10 * MB),
];
const NODE_600_40_900: Images = &[
    (&["gcr.io/600:latest"], 600 * MB),
    (&["gcr.io/40:latest"], 40 * MB),
    (&["gcr.io/900:latest"], 900 * MB),
];
const NODE_300_600_900: Images = &[
    (&["gcr.io/300:latest"], 300 * MB),
    (&["gcr.io/600:latest"], 600 * MB),
    (&["gcr.io/900:latest"], 900 * MB),
];
const NODE_4000_30: Images = &[
    (&["gcr.io/4000:latest"], 4000 * MB),
    (&["gcr.io/30:latest"], 30 * MB),
];
const NODE_20_30_40: Images = &[
    (&["gcr.io/20:latest"], 20 * MB),
    (&["gcr.io/30:latest"], 30 * MB),
    (&["gcr.io/40:latest"], 40 * MB),
];
const NODE_NO_IMAGES: Images = &[];

fn image_node(name: &str, images: Images) -> Node {
    node(name).images(images).obj()
}

fn containers(images: &[&str]) -> rkube_model::Pod {
    images.iter().fold(pod(), |p, i| p.image(i)).obj()
}

#[test]
fn test_image_locality_priority() {
    let test_40_250 = containers(&["gcr.io/40", "gcr.io/250"]);
    let test_40_300 = containers(&["gcr.io/40", "gcr.io/300"]);
    let test_min_max = containers(&["gcr.io/10", "gcr.io/4000"]);
    let test_300_600_900 = containers(&["gcr.io/300", "gcr.io/600", "gcr.io/900"]);
    let test_30_40 = containers(&["gcr.io/30", "gcr.io/40"]);
    let test_image_volume = pod().image("gcr.io/30").image_volume("gcr.io/300").obj();
    let test_30_300_as_containers = containers(&["gcr.io/30", "gcr.io/300"]);
    let test_30_init_300 = pod().image("gcr.io/30").init_image("gcr.io/300").obj();

    let cases =
        vec![
        (
            "two images spread on two nodes, prefer the larger image one",
            test_40_250,
            vec![image_node("node1", NODE_40_300_2000), image_node("node2", NODE_250_10)],
            vec![0, 5],
        ),
        (
            "two images on one node, prefer this node",
            test_40_300,
            vec![image_node("node1", NODE_40_300_2000), image_node("node2", NODE_250_10)],
            vec![7, 0],
        ),
        (
            "if exceed limit, use limit",
            test_min_max.clone(),
            vec![image_node("node1", NODE_4000_30), image_node("node2", NODE_250_10)],
            vec![MAX_NODE_SCORE, 0],
        ),
        (
            "if exceed limit, use limit (with node which has no images present)",
            test_min_max,
            vec![
                image_node("node1", NODE_4000_30),
                image_node("node2", NODE_250_10),
                image_node("node3", NODE_NO_IMAGES),
            ],
            vec![66, 0, 0],
        ),
        (
            "pod with multiple large images, node2 is preferred",
            test_300_600_900,
            vec![
                image_node("node1", NODE_600_40_900),
                image_node("node2", NODE_300_600_900),
                image_node("node3", NODE_NO_IMAGES),
            ],
            vec![32, 36, 0],
        ),
        (
            "pod with multiple small images",
            test_30_40,
            vec![image_node("node1", NODE_20_30_40), image_node("node2", NODE_4000_30)],
            vec![1, 0],
        ),
        (
            "pod with ImageVolume",
            test_image_volume,
            vec![image_node("node1", NODE_300_600_900), image_node("node2", NODE_4000_30)],
            vec![6, 0],
        ),
        (
            "same images as ImageVolume pod but as regular container images",
            test_30_300_as_containers,
            vec![image_node("node1", NODE_300_600_900), image_node("node2", NODE_4000_30)],
            vec![6, 0],
        ),
        (
            "include InitContainers: two images spread on two nodes, prefer the larger image one",
            test_30_init_300,
            vec![image_node("node1", NODE_40_300_2000), image_node("node2", NODE_20_30_40)],
            vec![6, 0],
        ),
    ];
    let mut f = Failures::new();
    for (name, p, nodes, want) in cases {
        let snap = snapshot(nodes, vec![]);
        // Upstream's Score reads the node count from the snapshot; rkube's
        // PreScore records it (the framework always runs it first).
        let run = score(&ImageLocality, &p, &snap, None, true);
        f.check(name, "prescore status", run.pre_score.clone(), success());
        f.check(
            name,
            "score codes all success",
            run.codes()
                .iter()
                .all(|c| *c == rkube_framework::Code::Success),
            true,
        );
        f.check(name, "scores", run.raw_scores(), want);
    }
    f.finish();
}

#[test]
fn test_normalized_image_name() {
    let digest = "root@sha256:4813494d137e1631bba301d5acab6e7bb7aa74ce1185d456565ef51d737677b2";
    let cases = [
        ("add :latest postfix 1", "root", "root:latest"),
        (
            "add :latest postfix 2",
            "gcr.io:5000/root",
            "gcr.io:5000/root:latest",
        ),
        ("keep it as is 1", "root:tag", "root:tag"),
        ("keep it as is 2", digest, digest),
    ];
    let mut f = Failures::new();
    for (name, input, want) in cases {
        f.check(
            name,
            "normalized",
            normalized_image_name(input),
            want.to_string(),
        );
    }
    f.finish();
}
