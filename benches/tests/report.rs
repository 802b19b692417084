//! The report module on synthetic measurements: tables, JSON round trip, SVG charts.

mod report {
    use forge_bench::report::{
        human_bytes, human_rate, markdown, read_json, read_peers, svg, svg_with_peers, table,
        write_json, write_svg, PeerMeasurement, BYTES_CHART_TITLE, PEERS_CHART_TITLE,
        WA_CHART_TITLE,
    };
    use forge_bench::{Measurement, Mode, Percentiles, Physical, Policy};

    fn measurement(
        backend: &str,
        mode: Mode,
        policy: Policy,
        turns: u32,
        physical_per_turn: Option<u64>,
    ) -> Measurement {
        let logical = 17_700 * u64::from(turns);
        Measurement {
            backend: backend.to_owned(),
            mode,
            policy,
            workload: "W1".to_owned(),
            sessions: 1,
            turns,
            logical_bytes: logical,
            handed_bytes: logical * 3,
            rows: 12 * u64::from(turns),
            commits: 5 * u64::from(turns),
            fsyncs: (backend == "sqlite").then_some(5 * u64::from(turns)),
            physical: physical_per_turn.map(|b| Physical {
                bytes: b * u64::from(turns),
                source: format!("{backend} bytes written"),
            }),
            process_write_bytes: None,
            deltas: 550 * u64::from(turns),
            elapsed_s: 0.5,
            latency_us: Some(Percentiles {
                p50: 38.0,
                p99: 1_250.0,
                max: 4_000.0,
                n: 550,
            }),
            publish_delay_ms: matches!(policy, Policy::Terminal { .. }).then_some(Percentiles {
                p50: 0.0,
                p99: 10.0,
                max: 10.0,
                n: 10,
            }),
            options: String::new(),
            filesystem: None,
            device_bytes: None,
        }
    }

    /// [`sample`] as measured on devices: each run on ext4 writes `ext4` times and on
    /// xfs `xfs` times its engine bytes.
    fn on_devices(ext4: u64, xfs: u64) -> Vec<Measurement> {
        let mut out = Vec::new();
        for (fs, factor) in [("ext4", ext4), ("xfs", xfs)] {
            for m in sample() {
                out.push(Measurement {
                    filesystem: Some(fs.to_owned()),
                    device_bytes: m.physical.as_ref().map(|p| p.bytes * factor),
                    ..m
                });
            }
        }
        out
    }

    /// sqlite and redb at T = 10 and 100 in both modes, memory without physical bytes,
    /// and a 64-session run.
    fn sample() -> Vec<Measurement> {
        let terminal = Policy::Terminal { window_ms: 10 };
        let mut ms = Vec::new();
        for turns in [10, 100] {
            // 17,700 × 3.41 = 60,357 bytes a turn.
            ms.push(measurement(
                "sqlite",
                Mode::Boundary,
                terminal,
                turns,
                Some(60_357),
            ));
            ms.push(measurement(
                "sqlite",
                Mode::PerDelta,
                Policy::EveryBoundary,
                turns,
                Some(2_584_200),
            ));
            ms.push(measurement(
                "redb",
                Mode::Boundary,
                terminal,
                turns,
                Some(212_400),
            ));
            ms.push(measurement(
                "redb",
                Mode::PerDelta,
                Policy::EveryBoundary,
                turns,
                Some(17_700_000),
            ));
            ms.push(measurement("memory", Mode::Boundary, terminal, turns, None));
        }
        let one = measurement("sqlite", Mode::Boundary, terminal, 10, Some(70_800 * 64));
        ms.push(Measurement {
            workload: "W1x64".to_owned(),
            sessions: 64,
            logical_bytes: one.logical_bytes * 64,
            ..one
        });
        ms
    }

    #[test]
    fn human_helpers_use_three_significant_digits() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(17_700), "17.7 kB");
        assert_eq!(human_bytes(1_770_000), "1.77 MB");
        assert_eq!(human_bytes(999_999), "1.00 MB");
        assert_eq!(human_rate(812_345.0), "812k");
        assert_eq!(human_rate(1_234_567.0), "1.23M");
        assert_eq!(human_rate(950.0), "950");
        assert_eq!(human_rate(f64::NAN), "–");
    }

    #[test]
    fn table_lists_each_backend_with_its_write_amplification() {
        let t = table(&sample());
        for backend in ["memory", "redb", "sqlite"] {
            assert!(t.contains(backend), "{backend} missing:\n{t}");
        }
        assert!(t.contains("3.41×"), "{t}");
        assert!(t.contains("146×"), "{t}");
        assert!(t.contains("1000×"), "{t}");
        assert!(t.contains("1.77 MB"), "{t}"); // logical bytes of W1 at T = 100
        assert!(t.contains("W1x64"), "{t}");
        assert!(t.contains("engine (sqlite): sqlite bytes written"), "{t}");
        assert!(t.contains("No device was measured"), "{t}");
        // memory has neither physical bytes nor fsyncs nor WA.
        let memory = t.lines().find(|l| l.starts_with("memory")).unwrap();
        assert!(memory.matches('–').count() >= 3, "{memory}");
    }

    #[test]
    fn table_columns_are_aligned() {
        let t = table(&sample());
        let widths: Vec<usize> = t
            .lines()
            .take_while(|l| !l.is_empty())
            .filter(|l| !l.starts_with('-'))
            .map(|l| l.chars().count())
            .collect();
        assert!(widths.len() > 2);
        // Numbers are right-aligned, so every row of the first group ends in the same column.
        assert!(widths.iter().all(|w| *w == widths[0]), "{t}");
    }

    #[test]
    fn table_groups_by_workload_then_backend() {
        let t = table(&sample());
        let pos = |needle: &str| t.find(needle).unwrap();
        assert!(pos("memory") < pos("redb"));
        assert!(pos("redb") < pos("sqlite"));
        assert!(pos("sqlite") < pos("W1x64"));
    }

    #[test]
    fn markdown_is_a_table_with_a_legend() {
        let md = markdown(&sample());
        let mut lines = md.lines();
        assert!(lines.next().unwrap().starts_with("| backend | mode |"));
        assert!(lines.next().unwrap().starts_with("|---|---|"));
        assert!(md.contains("| 3.41× |"), "{md}");
        assert!(md.contains("- engine (redb): redb bytes written"), "{md}");
    }

    #[test]
    fn empty_input_says_so() {
        assert_eq!(table(&[]), "no measurements\n");
        assert_eq!(markdown(&[]), "_no measurements_\n");
        let err = svg(&[]).unwrap_err();
        assert!(err.to_string().contains("no measurements"), "{err}");
        let only_memory: Vec<Measurement> = sample()
            .into_iter()
            .filter(|m| m.backend == "memory")
            .collect();
        let err = svg(&only_memory).unwrap_err();
        assert!(err.to_string().contains("physical bytes"), "{err}");
    }

    #[test]
    fn json_round_trips_and_carries_write_amplification() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bench.json");
        let ms = sample();
        write_json(&ms, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let first = &value.as_array().unwrap()[0];
        let wa = first["write_amplification"].as_f64().unwrap();
        assert!((wa - 3.41).abs() < 1e-9, "{wa}");
        assert_eq!(first["backend"], "sqlite");
        assert_eq!(read_json(&path).unwrap(), ms);
        // `default` marks boundary / terminal 10 ms with the backend's default options
        // only; `T` and `sessions` are fields of every row.
        for (row, m) in value.as_array().unwrap().iter().zip(&ms) {
            let expected = m.mode == Mode::Boundary
                && m.policy == (Policy::Terminal { window_ms: 10 })
                && m.options.is_empty();
            assert_eq!(row["default"], expected, "{row}");
            assert_eq!(row["T"], m.turns, "{row}");
            assert_eq!(row["sessions"], m.sessions, "{row}");
        }
        assert!(value
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["default"] == true));
        assert!(value
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["default"] == false));
        let mut tuned = ms[0].clone();
        tuned.policy = Policy::Terminal { window_ms: 10 };
        tuned.mode = Mode::Boundary;
        assert!(tuned.is_default());
        tuned.options = "journal=off".to_owned();
        assert!(!tuned.is_default());
        assert!(table(&[tuned.clone()]).contains("terminal/10ms (journal=off)"));
        tuned.options.clear();
        assert!(table(&[tuned]).contains("terminal/10ms ★"));
    }

    #[test]
    fn read_json_names_the_file_on_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.json");
        let err = read_json(&path).unwrap_err();
        assert!(format!("{err:#}").contains("missing.json"), "{err:#}");
    }

    #[test]
    fn svg_has_both_charts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bench.svg");
        write_svg(&sample(), &path).unwrap();
        let doc = std::fs::read_to_string(&path).unwrap();
        assert!(
            doc.trim_start().starts_with("<svg"),
            "{}",
            &doc[..80.min(doc.len())]
        );
        assert!(doc.trim_end().ends_with("</svg>"));
        assert!(doc.contains(WA_CHART_TITLE));
        assert!(
            doc.contains("W1, T = 100"),
            "the chart picks the largest T with both modes"
        );
        assert!(doc.contains(BYTES_CHART_TITLE));
        assert!(doc.contains("3.41×"), "bars carry value labels");
        // The memory backend has no physical bytes and is left out of the charts.
        assert!(!doc.contains("memory"));
        assert!(doc.contains("sqlite · boundary, terminal/10ms"));
    }

    #[test]
    fn svg_without_single_session_runs_still_draws_both_panels() {
        let ms: Vec<Measurement> = sample().into_iter().filter(|m| m.sessions == 64).collect();
        let doc = svg(&ms).unwrap();
        assert!(doc.contains("W1x64, T = 10"));
        assert!(doc.contains(BYTES_CHART_TITLE));
        assert!(doc.contains("no single-session W1 run"));
    }

    #[test]
    fn device_figures_lead_the_table_json_and_charts() {
        let ms = on_devices(3, 2);
        let t = table(&ms);
        let header = t.lines().next().unwrap();
        let at = |h: &str| {
            header
                .find(h)
                .unwrap_or_else(|| panic!("{h} missing: {header}"))
        };
        assert!(at("device WA") < at("engine WA"), "{header}");
        // sqlite boundary at 3.41× engine: 10.2× on ext4, 6.82× on xfs.
        assert!(
            t.contains("10.2×") && t.contains("6.82×") && t.contains("3.41×"),
            "{t}"
        );
        assert!(!t.contains("No device was measured"), "{t}");
        // ext4 rows come before xfs rows of the same workload.
        let ext4 = t.lines().position(|l| l.contains(" ext4 ")).unwrap();
        let xfs = t.lines().position(|l| l.contains(" xfs ")).unwrap();
        assert!(ext4 < xfs, "{t}");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bench.json");
        write_json(&ms, &path).unwrap();
        let value: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let first = &value.as_array().unwrap()[0];
        assert_eq!(first["filesystem"], "ext4", "{first}");
        let device_wa = first["device_wa"].as_f64().unwrap();
        assert!((device_wa - 3.0 * 3.41).abs() < 1e-9, "{first}");
        assert!(first["device_bytes"].as_u64().is_some(), "{first}");
        assert_eq!(read_json(&path).unwrap(), ms);

        // The charts draw ext4's device bytes: the sqlite boundary bar is 10.2×, and no
        // bar carries the engine's 3.41× or xfs's 6.82×.
        let doc = svg(&ms).unwrap();
        assert!(
            doc.contains("device bytes, ext4"),
            "the charts say what they draw"
        );
        assert!(doc.contains("10.2×"));
        assert!(!doc.contains("3.41×") && !doc.contains("6.82×"));
        // Without device figures, the engines' counters, said so.
        let doc = svg(&sample()).unwrap();
        assert!(doc.contains("engine-counted bytes"));
    }

    fn peer(system: &str, workload: &str, turns: u32, fs: &str, wa: u64) -> PeerMeasurement {
        PeerMeasurement {
            system: system.to_owned(),
            workload: workload.to_owned(),
            sessions: 1,
            turns,
            filesystem: fs.to_owned(),
            logical_bytes: 17_700 * u64::from(turns),
            device_bytes: 17_700 * u64::from(turns) * wa,
            command: format!("scripts/peers/x.py --turns {turns}"),
        }
    }

    #[test]
    fn the_peers_chart_draws_the_default_path_beside_the_peers_on_the_runs_filesystem() {
        let ms = on_devices(3, 2);
        let peers = vec![
            peer("Agents SDK, SQLiteSession", "W1", 10, "ext4", 8),
            peer("Agents SDK, SQLiteSession", "W1", 100, "ext4", 7),
            peer("Agents SDK, SQLiteSession", "W2", 100, "ext4", 6),
            // Another filesystem than the run's charted one: not drawn.
            peer("Only on xfs", "W1", 10, "xfs", 9),
        ];
        let without = svg(&ms).unwrap();
        assert!(
            !without.contains(PEERS_CHART_TITLE),
            "no peers, no third chart"
        );
        let doc = svg_with_peers(&ms, &peers).unwrap();
        assert!(doc.contains(PEERS_CHART_TITLE));
        assert!(doc.contains(WA_CHART_TITLE) && doc.contains(BYTES_CHART_TITLE));
        assert!(
            doc.contains("Agents SDK, SQLiteSession"),
            "the peer is in the legend"
        );
        assert!(
            !doc.contains("Only on xfs"),
            "a peer on another filesystem is left out"
        );
        // forge-store's default path (boundary, terminal/10ms, default options) only:
        // sqlite's default rows are drawn, and the per-delta rows are not a line of it.
        assert!(
            doc.contains("forge-store, sqlite ★"),
            "the default path is drawn"
        );
        assert!(
            !doc.contains("forge-store, memory"),
            "memory writes nothing to draw"
        );
        // The y axis is in device bytes per logical byte, log scale, as factors.
        assert!(doc.contains("device bytes / logical bytes (log scale)"));
        assert!(doc.contains("10×"), "a tick label as a factor");
        // The third chart makes the document a panel taller.
        let height = |d: &str| -> u32 {
            let at = d.find("height=\"").unwrap() + 8;
            d[at..].split('"').next().unwrap().parse().unwrap()
        };
        assert_eq!(height(&doc) * 2, height(&without) * 3);
    }

    #[test]
    fn read_peers_reads_the_scripts_rows_and_names_a_bad_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peers.json");
        let rows = vec![
            peer("A", "W1", 10, "ext4", 8),
            peer("B", "W2", 100, "ext4", 20),
        ];
        std::fs::write(&path, serde_json::to_string(&rows).unwrap()).unwrap();
        assert_eq!(read_peers(&path).unwrap(), rows);
        assert!((rows[1].device_amplification() - 20.0).abs() < 1e-9);

        let mut bad = rows.clone();
        bad[1].logical_bytes = 0;
        std::fs::write(&path, serde_json::to_string(&bad).unwrap()).unwrap();
        let err = format!("{:#}", read_peers(&path).unwrap_err());
        assert!(
            err.contains("peers.json")
                && err.contains("row 1")
                && err.contains("\"B\"")
                && err.contains("no logical bytes"),
            "{err}"
        );
        std::fs::write(&path, "[{\"system\": \"A\"}]").unwrap();
        let err = format!("{:#}", read_peers(&path).unwrap_err());
        assert!(err.contains("JSON array of peer measurements"), "{err}");
    }

    /// Writes the sample charts to `$FORGE_REPORT_SAMPLE` for a look.
    #[test]
    fn sample_svg_for_inspection() {
        if let Ok(path) = std::env::var("FORGE_REPORT_SAMPLE") {
            write_svg(&sample(), std::path::Path::new(&path)).unwrap();
        }
    }
}
