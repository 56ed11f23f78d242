//! The example analysis in recover/examples/ runs, and its counts agree with the truth
//! stream's references rendered as text (the collector's own observation, not recovery).

#[path = "../examples/hot_pages.rs"]
mod hot_pages;

use dep_profile::container::Profile;
use dep_profile::simulate::{program_path, random_program, write_profile, PathStep, Rng};
use dep_profile::Machine;
use dep_recover::{Format, Recovery, Source};
use std::collections::HashMap;

#[test]
fn the_example_sink_counts_what_the_truth_stream_saw() {
    let mut rng = Rng::new(11);
    let mut prog = random_program(&mut rng, 5);
    let paths: Vec<Vec<PathStep>> = (0..3).map(|_| program_path(&mut rng, &mut prog, 2000, true)).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.dep");
    write_profile(std::fs::File::create(&path).unwrap(), Machine::x86_64(2696), &prog.code, &paths, 11).unwrap();
    let p = Profile::open(&path).unwrap();
    let rec = Recovery::new(&p, 2);

    let mut text = Vec::new();
    rec.events(Source::Truth).rendered(Format::Text, &mut text).unwrap();
    let mut want: Vec<HashMap<u64, [u64; 2]>> = vec![HashMap::new(); p.threads.len()];
    for line in String::from_utf8(text).unwrap().lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (thread, addr) = (f[0].parse::<usize>().unwrap(), u64::from_str_radix(&f[3][2..], 16).unwrap());
        want[thread].entry(addr & !0xfff).or_default()[(f[2] == "W") as usize] += 1;
    }
    assert!(want.iter().all(|t| t.len() > 1), "every thread touches several pages");

    let got = hot_pages::hottest(&rec, usize::MAX).unwrap();
    assert_eq!(got.len(), want.len());
    for (t, (g, w)) in got.iter().zip(&want).enumerate() {
        let g: HashMap<u64, [u64; 2]> = g.iter().copied().collect();
        assert_eq!(&g, w, "thread {t}");
    }
    // Busiest first.
    let top = hot_pages::hottest(&rec, 3).unwrap();
    for t in &top {
        assert!(t.len() <= 3 && t.windows(2).all(|w| w[0].1[0] + w[0].1[1] >= w[1].1[0] + w[1].1[1]));
    }
}
