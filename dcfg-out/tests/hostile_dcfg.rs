//! Hand-made DCFG and DCFG-trace pairs that a hostile or damaged producer could write: the
//! checker refuses each with the variant naming the problem, promptly, without a panic.

use dep_dcfg_out::dcfg::check::{read_dcfg, read_trace, CheckError, Report};
use serde_json::{json, Value};

/// One process, one block (node 3, one instruction) looping on itself: START -1-> 3,
/// 3 -2-> 3 five times, 3 -3-> END, all by thread 0 (`per_thread` gives each edge's counts).
fn dcfg(per_thread: [Value; 3], instr_per_thread: Value, instr_count: Value) -> Value {
    json!({
        "EDGE_TYPES": [["EDGE_TYPE_ID", "EDGE_TYPE"], [1, "ENTRY"], [2, "DIRECT_UNCONDITIONAL_BRANCH"], [3, "EXIT"]],
        "SPECIAL_NODES": [["NODE_ID", "NODE_NAME"], [1, "START"], [2, "END"]],
        "PROCESSES": [["PROCESS_ID", "PROCESS_DATA"], [7, {
            "INSTR_COUNT": instr_count,
            "INSTR_COUNT_PER_THREAD": instr_per_thread,
            "IMAGES": [["IMAGE_ID", "LOAD_ADDR", "SIZE", "IMAGE_DATA"], [1, "0x1000", 16, {
                "BASIC_BLOCKS": [["NODE_ID", "ADDR_OFFSET", "SIZE", "NUM_INSTRS", "LAST_INSTR_OFFSET", "COUNT"], [3, "0x0", 2, 1, 0, 6]]
            }]],
            "EDGES": [["EDGE_ID", "SOURCE_NODE_ID", "TARGET_NODE_ID", "EDGE_TYPE_ID", "COUNT_PER_THREAD"],
                [1, 1, 3, 1, per_thread[0]], [2, 3, 3, 2, per_thread[1]], [3, 3, 2, 3, per_thread[2]]]
        }]]
    })
}

fn good_dcfg() -> Value {
    dcfg([json!([1]), json!([5]), json!([1])], json!([6]), json!(6))
}

/// A trace of thread `thread` with one chunk and the given transition table rows.
fn trace(table: Value, thread: Value, edge_count: Value, first: Value, seq: &str) -> Value {
    let mut t = vec![json!(["CURRENT_EDGE_ID", "TRANSITION_CODE", "NEXT_EDGE_IDS"])];
    t.extend(table.as_array().unwrap().iter().cloned());
    json!({
        "PROCESSES": [["PROCESS_ID", "STRING_DICTIONARY", "TRANSITION_TABLE", "THREAD_DATA"], [7, {}, t,
            [["THREAD_ID", "TRACE_DATA"], [thread, [["PRECEDING_INSTR_COUNT", "INSTR_COUNT", "EDGE_COUNT", "FIRST_EDGE_ID", "EDGE_ID_SEQUENCE"],
                [0, 6, edge_count, first, seq]]]]]]
    })
}

/// Edge 1, edge 2 (the empty code), edge 2 four times more (bits 0000), edge 3 (bit 1):
/// "00001" and a padding bit, "000010", is 'C'.
fn good_trace() -> Value {
    trace(json!([[1, "", [2]], [2, "0", [2]], [2, "1", [3]]]), json!(0), json!(7), json!(1), "C")
}

/// Checks a pair on another thread, failing the test if that takes more than ten seconds.
fn check(d: Value, t: Value) -> Result<u64, CheckError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = Report::default();
        let (d, t) = (serde_json::to_vec(&d).unwrap(), serde_json::to_vec(&t).unwrap());
        let res = read_dcfg(&d[..], &mut r).and_then(|p| read_trace(&t[..], &p, 2, &mut r, None));
        let _ = tx.send(res.map(|_| r.decoded_edges));
    });
    rx.recv_timeout(std::time::Duration::from_secs(10)).expect("the check hung")
}

#[test]
fn the_hand_made_pair_passes() {
    assert_eq!(check(good_dcfg(), good_trace()).unwrap(), 7);
}

/// A row with the empty code naming its own edge reads no bits: a chunk claiming more edges
/// than the DCFG gives its thread is refused before decoding, not decoded for ever.
#[test]
fn edge_count_beyond_the_thread_is_refused() {
    let t = trace(json!([[1, "", [2]], [2, "", [2]]]), json!(0), json!(u64::MAX), json!(1), "");
    let e = check(good_dcfg(), t).unwrap_err();
    assert!(matches!(e, CheckError::EdgeCount { count: u64::MAX, left: 7, .. }), "{e}");
}

/// Counts whose sums overflow 64 bits are refused, not wrapped into agreement.
#[test]
fn overflowing_counts_are_refused() {
    // INSTR_COUNT_PER_THREAD [2^64 - 1, 1] sums to 0 when wrapped.
    let d = dcfg([json!([1, 0]), json!([5, 0]), json!([1, 0])], json!([u64::MAX, 1]), json!(0));
    let e = check(d, good_trace()).unwrap_err();
    assert!(matches!(e, CheckError::Overflow(_)), "{e}");
    // Edge counts whose node sums overflow.
    let d = dcfg([json!([1]), json!([u64::MAX]), json!([1])], json!([6]), json!(6));
    let e = check(d, good_trace()).unwrap_err();
    assert!(matches!(e, CheckError::Overflow(_)), "{e}");
}

/// Ids beyond 32 bits are refused where read, not truncated into another edge's id.
#[test]
fn ids_beyond_32_bits_are_refused() {
    let big = (1u64 << 32) + 1;
    let t = trace(json!([[1, "", [2]], [2, "0", [2]], [2, "1", [3]]]), json!(0), json!(7), json!(big), "C");
    let e = check(good_dcfg(), t).unwrap_err();
    assert!(matches!(e, CheckError::BigId(_, b) if b == big), "{e}");
    let t = trace(json!([[big, "", [2]], [2, "0", [2]], [2, "1", [3]]]), json!(0), json!(7), json!(1), "C");
    let e = check(good_dcfg(), t).unwrap_err();
    assert!(matches!(e, CheckError::BigId(_, b) if b == big), "{e}");
}

/// A thread the DCFG does not have, or one traced twice, is refused.
#[test]
fn unknown_and_repeated_threads_are_refused() {
    let e = check(good_dcfg(), trace(json!([[1, "", [2]]]), json!(4), json!(1), json!(1), "")).unwrap_err();
    assert!(matches!(e, CheckError::Thread { thread: 4, .. }), "{e}");
    let mut t = good_trace();
    let rows = t["PROCESSES"][1][3].as_array_mut().unwrap();
    let again = rows[1].clone();
    rows.push(again);
    let e = check(good_dcfg(), t).unwrap_err();
    assert!(matches!(e, CheckError::Thread { thread: 0, .. }), "{e}");
}

/// A routine whose dominator tree is one long chain, with a loop of all its nodes: the
/// checks of the tree and of the loop take time linear in the nodes, not quadratic.
#[test]
fn a_long_dominator_chain_checks_in_linear_time() {
    let n = 200_000u64;
    let blocks: Vec<Value> = std::iter::once(json!(["NODE_ID", "ADDR_OFFSET", "SIZE", "NUM_INSTRS", "LAST_INSTR_OFFSET", "COUNT"]))
        .chain((0..n).map(|i| json!([3 + i, i, 1, 1, 0, 0])))
        .collect();
    let idoms: Vec<Value> =
        std::iter::once(json!(["NODE_ID", "IDOM_NODE_ID"])).chain((0..n).map(|i| json!([3 + i, 3 + i.saturating_sub(1)]))).collect();
    let members: Vec<u64> = (3..3 + n).collect();
    let d = json!({
        "EDGE_TYPES": [["EDGE_TYPE_ID", "EDGE_TYPE"], [1, "ENTRY"]],
        "SPECIAL_NODES": [["NODE_ID", "NODE_NAME"], [1, "START"], [2, "END"]],
        "PROCESSES": [["PROCESS_ID", "PROCESS_DATA"], [7, {
            "INSTR_COUNT": 0,
            "INSTR_COUNT_PER_THREAD": [],
            "IMAGES": [["IMAGE_ID", "LOAD_ADDR", "SIZE", "IMAGE_DATA"], [1, "0x1000", n, {
                "BASIC_BLOCKS": blocks,
                "ROUTINES": [["ENTRY_NODE_ID", "EXIT_NODE_IDS", "NODES", "LOOPS"], [3, [], idoms,
                    [["LOOP_HEAD_NODE_ID", "LOOP_NODE_IDS"], [3, members]]]]
            }]]
        }]]
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = Report::default();
        let _ = tx.send(read_dcfg(&serde_json::to_vec(&d).unwrap()[..], &mut r).map(|_| (r.routines, r.loops)));
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("the check took more than ten seconds");
    assert_eq!(got.unwrap(), (1, 1));
}

/// A thread the DCFG counts edges for but the trace leaves out is refused, not passed over.
#[test]
fn a_thread_left_out_of_the_trace_is_refused() {
    let mut t = good_trace();
    t["PROCESSES"][1][3].as_array_mut().unwrap().truncate(1);
    let e = check(good_dcfg(), t).unwrap_err();
    assert!(matches!(e, CheckError::Thread { thread: 0, .. }), "{e}");
}

/// Each kind of damage is refused with the variant naming it, so a script can tell a
/// malformed document from counts that disagree or a trace that does not follow the graph.
#[test]
fn each_damage_is_named_by_its_variant() {
    // Edge 2 ran four times, not five: node 3's COUNT of 6 disagrees with its edges.
    let d = dcfg([json!([1]), json!([4]), json!([1])], json!([6]), json!(6));
    let e = check(d, good_trace()).unwrap_err();
    assert!(matches!(&e, CheckError::Counts { what, .. } if what == "process 7"), "{e}");

    let mut d = good_dcfg();
    d["PROCESSES"][1][1]["EDGES"].as_array_mut().unwrap()[3][0] = json!(2);
    let e = check(d, good_trace()).unwrap_err();
    assert!(matches!(e, CheckError::Duplicate { item: "edge", id: 2, .. }), "{e}");

    let mut d = good_dcfg();
    d["PROCESSES"][1][1]["EDGES"][2][2] = json!(9);
    let e = check(d, good_trace()).unwrap_err();
    assert!(matches!(e, CheckError::UnknownNode { edge: 2, node: 9, .. }), "{e}");

    let mut d = good_dcfg();
    d["PROCESSES"][1][1]["EDGES"][2][3] = json!(40);
    let e = check(d, good_trace()).unwrap_err();
    assert!(matches!(e, CheckError::UnknownEdgeType { edge: 2, ty: 40, .. }), "{e}");

    let mut d = good_dcfg();
    d["PROCESSES"][1][1]["INSTR_COUNT"] = json!("six");
    let e = check(d, good_trace()).unwrap_err();
    assert!(matches!(&e, CheckError::NotInteger(v) if v == "\"six\""), "{e}");
    let mut d = good_dcfg();
    d["PROCESSES"][1][1]["INSTR_COUNT"] = json!(-6);
    assert!(matches!(check(d, good_trace()).unwrap_err(), CheckError::NotUnsigned(_)));

    let mut d = good_dcfg();
    d["PROCESSES"][1][1]["EDGES"] = json!({"EDGE_ID": 1});
    let e = check(d, good_trace()).unwrap_err();
    assert!(matches!(e, CheckError::Shape { problem: "is not a table", .. }), "{e}");

    let mut d = good_dcfg();
    d["PROCESSES"][1][1]["EDGES"][0][0] = json!("ID");
    let e = check(d, good_trace()).unwrap_err();
    assert!(matches!(&e, CheckError::MissingColumn { column, .. } if column == "EDGE_ID"), "{e}");

    let mut t = good_trace();
    t["PROCESSES"][1][0] = json!(8);
    assert!(matches!(check(good_dcfg(), t).unwrap_err(), CheckError::UnknownProcess { .. }));

    // Edge 1 (START -> 3) again after edge 2: it leaves START, not node 3.
    let t = trace(json!([[1, "", [2]], [2, "0", [2]], [2, "1", [1]]]), json!(0), json!(7), json!(1), "C");
    let e = check(good_dcfg(), t).unwrap_err();
    assert!(matches!(e, CheckError::Discontinuous { thread: 0, edge: 1, src: 1, reached: 3, .. }), "{e}");

    // A decoded edge the graph lacks (and no row to go on from it: the first problem found
    // is the one named).
    let t = trace(json!([[1, "", [5]]]), json!(0), json!(7), json!(1), "");
    let e = check(good_dcfg(), t).unwrap_err();
    assert!(matches!(e, CheckError::UnknownEdge { thread: 0, edge: 5, .. }), "{e}");
}

/// The hand-made trace in two chunks, rows `a` and `b` (good ones: edges 1 and 2 twice, bit
/// 0 as "A"; then edges 2, 2, 2 and 3, bits 001 as "I").
fn two_chunks(a: Value, b: Value) -> Value {
    json!({
        "PROCESSES": [["PROCESS_ID", "STRING_DICTIONARY", "TRANSITION_TABLE", "THREAD_DATA"], [7, {},
            [["CURRENT_EDGE_ID", "TRANSITION_CODE", "NEXT_EDGE_IDS"], [1, "", [2]], [2, "0", [2]], [2, "1", [3]]],
            [["THREAD_ID", "TRACE_DATA"], [0, [["PRECEDING_INSTR_COUNT", "INSTR_COUNT", "EDGE_COUNT", "FIRST_EDGE_ID", "EDGE_ID_SEQUENCE"], a, b]]]]]
    })
}

/// Chunks decode in parallel but are judged in order: of two problems, the one in the
/// earlier chunk is named, whichever a worker or the reader finds first.
#[test]
fn the_first_problem_in_the_trace_is_named() {
    let (a, b) = (json!([0, 2, 3, 1, "A"]), json!([2, 4, 4, 2, "I"]));
    assert_eq!(check(good_dcfg(), two_chunks(a.clone(), b.clone())).unwrap(), 7);
    // The first chunk claims 3 instructions (a worker finds it), the second 9 edges of the
    // 4 left (the reader finds it).
    let e = check(good_dcfg(), two_chunks(json!([0, 3, 3, 1, "A"]), json!([3, 4, 9, 2, "I"]))).unwrap_err();
    assert!(matches!(&e, CheckError::Counts { detail, .. } if detail.contains("INSTR_COUNT is 3")), "{e}");
    // The first chunk decodes an edge the graph lacks; the second is fine.
    let e = check(good_dcfg(), two_chunks(json!([0, 2, 3, 5, "A"]), b.clone())).unwrap_err();
    assert!(matches!(e, CheckError::UnknownEdge { edge: 5, .. }), "{e}");
    // The second chunk starts with edge 1, from START, where the first reached node 3:
    // only the chunks' order links them.
    let e = check(good_dcfg(), two_chunks(a.clone(), json!([2, 3, 4, 1, "Q"]))).unwrap_err();
    assert!(matches!(e, CheckError::Discontinuous { thread: 0, edge: 1, src: 1, reached: 3, .. }), "{e}");
    // A document cut short after a bad chunk: the chunk's problem, read first, is named.
    let cut = |t: Value| {
        let text = t.to_string();
        text[..text.find("[2,4,4").unwrap()].to_string()
    };
    let e = check_text(good_dcfg(), &cut(two_chunks(json!([0, 3, 3, 1, "A"]), b.clone()))).unwrap_err();
    assert!(matches!(e, CheckError::Counts { .. }), "{e}");
    let e = check_text(good_dcfg(), &cut(two_chunks(a, b))).unwrap_err();
    assert!(matches!(e, CheckError::Json(_)), "{e}");
}

/// Checks a DCFG against the trace text `t`.
fn check_text(d: Value, t: &str) -> Result<u64, CheckError> {
    let mut r = Report::default();
    let p = read_dcfg(&serde_json::to_vec(&d).unwrap()[..], &mut r)?;
    read_trace(t.as_bytes(), &p, 2, &mut r, None).map(|_| r.decoded_edges)
}

/// Read in one pass, a trace must give a process's THREAD_DATA after what decodes it and a
/// thread's THREAD_ID before its TRACE_DATA, as the spec orders them (3.3, 3.6); a chunk's
/// row, read whole, may order its cells as it likes.
#[test]
fn trace_columns_are_read_by_their_headers() {
    let mut t = good_trace();
    let rows = t["PROCESSES"][1][3][1][1].as_array_mut().unwrap();
    for r in rows.iter_mut() {
        r.as_array_mut().unwrap().reverse();
    }
    assert_eq!(check(good_dcfg(), t).unwrap(), 7);
    let mut t = good_trace();
    for r in t["PROCESSES"].as_array_mut().unwrap() {
        r.as_array_mut().unwrap().swap(2, 3);
    }
    let e = check(good_dcfg(), t).unwrap_err();
    assert!(matches!(e, CheckError::Shape { problem, .. } if problem.contains("THREAD_DATA before")), "{e}");
    let mut t = good_trace();
    for r in t["PROCESSES"][1][3].as_array_mut().unwrap() {
        r.as_array_mut().unwrap().reverse();
    }
    let e = check(good_dcfg(), t).unwrap_err();
    assert!(matches!(e, CheckError::Shape { problem, .. } if problem.contains("TRACE_DATA before")), "{e}");
}

/// What is not JSON is refused as such, and a value where an integer belongs is named in a
/// message of bounded length, however long the value.
#[test]
fn malformed_documents_are_named_briefly() {
    let mut r = Report::default();
    assert!(matches!(read_dcfg(&b"{\"PROCESSES\": [["[..], &mut r), Err(CheckError::Json(_))));
    let p = read_dcfg(&serde_json::to_vec(&good_dcfg()).unwrap()[..], &mut r).unwrap();
    assert!(matches!(read_trace(&b"{\"PROCESSES\": [[\"PROCESS_ID\", "[..], &p, 2, &mut r, None), Err(CheckError::Json(_))));
    let mut d = good_dcfg();
    d["PROCESSES"][1][1]["INSTR_COUNT"] = json!((0..100_000).collect::<Vec<u32>>());
    let e = check(d, good_trace()).unwrap_err();
    assert!(matches!(&e, CheckError::NotInteger(v) if v.starts_with("[0,1,2,") && v.len() < 300), "{e}");
}

/// Edge counts listed for a thread INSTR_COUNT_PER_THREAD lacks are refused, even zero
/// counts (held as the executions there are, the list keeps its length).
#[test]
fn counts_for_threads_the_process_lacks_are_refused() {
    let d = dcfg([json!([1, 0]), json!([5, 0]), json!([1, 0])], json!([6]), json!(6));
    let e = check(d, good_trace()).unwrap_err();
    assert!(matches!(&e, CheckError::Counts { detail, .. } if detail.contains("thread 1, which INSTR_COUNT_PER_THREAD lacks")), "{e}");
    let d = dcfg([json!([1, 0]), json!([5]), json!([1])], json!([6]), json!(6));
    assert_eq!(check(d, good_trace()).unwrap(), 7, "a count for a thread only from START is not one of its instructions");
}
