//! `dep dcfg --check`'s trace reader ends its threads before it returns, thread-locals and
//! all: what it allocated is freed when it returns. A thread left to `std::thread::scope` is
//! only waited for until its closure returns, and may still be freeing its thread-locals
//! (crossbeam's channel context) afterwards, which the fuzzer's leak check took for leaks.

use dep_dcfg_out::dcfg::check::{read_dcfg, read_trace, Report};
use serde_json::json;

#[path = "../../tests/common/peak_alloc.rs"]
#[allow(dead_code)] // its peak measures are other binaries'
mod peak_alloc;

#[test]
fn what_the_trace_reader_allocates_is_freed_when_it_returns() {
    let _turn = peak_alloc::turn();
    // One block (node 3) looping on itself: START -1-> 3, 3 -2-> 3 five times, 3 -3-> END.
    let dcfg = json!({
        "EDGE_TYPES": [["EDGE_TYPE_ID", "EDGE_TYPE"], [1, "ENTRY"], [2, "DIRECT_UNCONDITIONAL_BRANCH"], [3, "EXIT"]],
        "SPECIAL_NODES": [["NODE_ID", "NODE_NAME"], [1, "START"], [2, "END"]],
        "PROCESSES": [["PROCESS_ID", "PROCESS_DATA"], [7, {
            "INSTR_COUNT": 6,
            "INSTR_COUNT_PER_THREAD": [6],
            "IMAGES": [["IMAGE_ID", "LOAD_ADDR", "SIZE", "IMAGE_DATA"], [1, "0x1000", 16, {
                "BASIC_BLOCKS": [["NODE_ID", "ADDR_OFFSET", "SIZE", "NUM_INSTRS", "LAST_INSTR_OFFSET", "COUNT"], [3, "0x0", 2, 1, 0, 6]]
            }]],
            "EDGES": [["EDGE_ID", "SOURCE_NODE_ID", "TARGET_NODE_ID", "EDGE_TYPE_ID", "COUNT_PER_THREAD"],
                [1, 1, 3, 1, [1]], [2, 3, 3, 2, [5]], [3, 3, 2, 3, [1]]]
        }]]
    });
    // Edge 1, then 2 five times and 3: "000010" is 'C'.
    let trace = json!({
        "PROCESSES": [["PROCESS_ID", "STRING_DICTIONARY", "TRANSITION_TABLE", "THREAD_DATA"], [7, {},
            [["CURRENT_EDGE_ID", "TRANSITION_CODE", "NEXT_EDGE_IDS"], [1, "", [2]], [2, "0", [2]], [2, "1", [3]]],
            [["THREAD_ID", "TRACE_DATA"], [0, [["PRECEDING_INSTR_COUNT", "INSTR_COUNT", "EDGE_COUNT", "FIRST_EDGE_ID", "EDGE_ID_SEQUENCE"],
                [0, 6, 7, 1, "C"]]]]]]
    });
    let (dcfg, trace) = (serde_json::to_vec(&dcfg).unwrap(), serde_json::to_vec(&trace).unwrap());
    let mut r = Report::default();
    let procs = read_dcfg(&dcfg[..], &mut r).unwrap();
    // Each call from a thread of its own, joined: the calling thread judges the chunks, and
    // what it keeps for good in thread-locals (crossbeam's context) is freed with it.
    let call = |r: &mut Report| std::thread::scope(|s| s.spawn(|| read_trace(&trace[..], &procs, 2, r, None)).join().unwrap());
    call(&mut r).unwrap();
    let before = peak_alloc::live();
    // The reader's threads end a few microseconds after their closures do: over many calls,
    // a reader that does not join them leaves some of their thread-locals live now and then.
    for k in 0..2000 {
        call(&mut r).unwrap();
        let now = peak_alloc::live();
        assert!(now <= before, "call {k}: {} bytes the reader allocated still live after it returned", now - before);
    }
    assert_eq!(r.decoded_edges, 7 * 2001);
}
