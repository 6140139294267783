//! The drift policies and statement grouping, without a database. The
//! same behaviour against real servers is in `tests/relational_*.rs`.

use super::config::{
    ColumnsPolicy, DeletePolicy, SchemaDrift, TruncatePolicy, TypesPolicy, WriteMode,
};
use abrq_core::{idempotency_key, Batch, BatchMeta, Item, Op, Record};
use chrono::Utc;
use serde_json::{json, Map, Value};

use super::plan::{Counts, Items, Plan, PlanError, Policy, Step};
use super::table::{Column, TableInfo};
use super::types::{Cell, Dialect, SqlType};

/// Plans a whole batch as one table's part.
fn plan<'a>(b: &'a Batch, table: Option<&TableInfo>, p: &Policy) -> Result<Plan<'a>, PlanError> {
    let items: Vec<(usize, &Item)> = b.items.iter().enumerate().collect();
    super::plan::plan(Items(&items), table, p)
}

fn rec(op: Op, v: Value) -> Item {
    let Value::Object(fields) = v else {
        unreachable!("test records are objects")
    };
    Item::Record(Record { op, fields })
}

fn ins(v: Value) -> Item {
    rec(Op::Insert, v)
}

fn batch(items: Vec<Item>) -> Batch {
    Batch {
        meta: BatchMeta {
            stream: "s".into(),
            seq: 1,
            idempotency_key: idempotency_key(uuid::Uuid::nil(), 1, uuid::Uuid::nil()),
            staged_at: Utc::now(),
            records: 0,
            bytes: 0,
        },
        items,
        lines: None,
    }
}

fn policy(columns: ColumnsPolicy, types: TypesPolicy) -> Policy {
    Policy {
        dialect: Dialect::Postgres,
        drift: SchemaDrift {
            columns,
            types,
            ..SchemaDrift::default()
        },
        truncate: TruncatePolicy::Apply,
        mode: WriteMode::Append,
        deletes: DeletePolicy::Hard,
        key: vec![],
    }
}

fn default_policy() -> Policy {
    policy(ColumnsPolicy::Evolve, TypesPolicy::Widen)
}

/// Table `(id bigint, name varchar(5))`, key `id`.
fn table() -> TableInfo {
    TableInfo {
        columns: vec![
            Column::new("id", SqlType::Int(64), false),
            Column::new("name", SqlType::Text(Some(5)), true),
        ],
        key: vec!["id".into()],
        ..TableInfo::default()
    }
}

/// Every written row as (item, cells).
fn written<'a>(p: &'a Plan<'a>) -> Vec<(usize, &'a [Cell<'a>])> {
    p.steps
        .iter()
        .flat_map(|s| match s {
            Step::Write { rows, .. } => rows.iter().map(|r| (r.item, r.cells.as_slice())).collect(),
            Step::Truncate | Step::Delete { .. } | Step::DeleteOne { .. } => vec![],
        })
        .collect()
}

#[test]
fn a_missing_table_is_created_from_the_batch() {
    let b = batch(vec![
        ins(json!({"id": 1, "at": "2024-01-01T00:00:00Z", "doc": {"a": 1}, "none": null})),
        ins(json!({"id": 2.5, "flag": true})),
        Item::Schema {
            columns: obj(json!({"code": "varchar(3)", "id": "bigint"})),
        },
    ]);
    let p = plan(&b, None, &default_policy()).unwrap();
    assert!(p.create);
    let cols: Vec<(&str, &SqlType)> = p
        .table
        .columns
        .iter()
        .map(|c| (c.name.as_str(), &c.ty))
        .collect();
    // declared types win and come first (2.5 widens the declared bigint
    // exactly, to numeric); the null-only field waits for a value
    assert_eq!(
        cols,
        vec![
            ("code", &SqlType::Text(Some(3))),
            ("id", &SqlType::Numeric(None)),
            ("at", &SqlType::Timestamp),
            ("doc", &SqlType::Json),
            ("flag", &SqlType::Bool),
        ]
    );
    assert_eq!(p.steps.len(), 1);
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

#[test]
fn evolve_adds_columns_and_widen_alters_them() {
    let b = batch(vec![
        ins(json!({"id": 1, "name": "toolongname", "extra": 7})),
        ins(json!({"id": 2})),
    ]);
    let p = plan(&b, Some(&table()), &default_policy()).unwrap();
    assert_eq!(p.add, vec!["extra".to_string()]);
    assert_eq!(p.alter, vec!["name".to_string()]);
    assert_eq!(p.table.column("name").unwrap().ty, SqlType::Text(None));
    assert_eq!(p.counts, Counts::default());
    let rows = written(&p);
    assert_eq!(rows.len(), 2);
    // append mode: one statement over the union, NULL where a field is absent
    assert_eq!(rows[1].1, &[Cell::Int(2), Cell::Null, Cell::Null]);
}

#[test]
fn discard_values_and_rows_are_counted() {
    let b = batch(vec![
        ins(json!({"id": 1, "extra": 7, "more": "x"})),
        ins(json!({"id": 2, "name": "toolongname"})),
        ins(json!({"id": 3, "name": "ok", "extra": null})),
    ]);
    let p = plan(
        &b,
        Some(&table()),
        &policy(ColumnsPolicy::DiscardValues, TypesPolicy::DiscardValues),
    )
    .unwrap();
    assert!(!p.has_ddl());
    assert_eq!(p.counts.dropped_values, 3);
    assert_eq!(written(&p)[1].1, &[Cell::Int(2), Cell::Null]);

    let p = plan(
        &b,
        Some(&table()),
        &policy(ColumnsPolicy::DiscardRows, TypesPolicy::DiscardRows),
    )
    .unwrap();
    assert_eq!((p.counts.dropped_rows, p.counts.dropped_values), (2, 0));
    assert_eq!(written(&p).iter().map(|r| r.0).collect::<Vec<_>>(), vec![2]);
}

#[test]
fn freeze_blocks_at_the_record() {
    let b = batch(vec![
        ins(json!({"id": 1})),
        ins(json!({"id": 2, "extra": 1})),
    ]);
    match plan(
        &b,
        Some(&table()),
        &policy(ColumnsPolicy::Freeze, TypesPolicy::Widen),
    ) {
        Err(PlanError::Drift { item: 1, message }) => {
            assert!(message.contains("extra"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    let b = batch(vec![ins(json!({"id": 1, "name": "toolongname"}))]);
    match plan(
        &b,
        Some(&table()),
        &policy(ColumnsPolicy::Evolve, TypesPolicy::Freeze),
    ) {
        Err(PlanError::Drift { item: 0, message }) => {
            assert!(message.contains("varchar(5)"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn widen_strict_without_a_path_is_drift() {
    let b = batch(vec![ins(json!({"id": "not a number"}))]);
    let strict = policy(ColumnsPolicy::Evolve, TypesPolicy::WidenStrict);
    match plan(&b, Some(&table()), &strict) {
        Err(PlanError::Drift { item: 0, message }) => {
            assert!(
                message.contains(r#"value "not a number" does not fit column "id" of type bigint"#),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
    // widen_strict still widens within a kind
    let b = batch(vec![ins(json!({"id": 2.5, "name": "longer than five"}))]);
    let p = plan(&b, Some(&table()), &strict).unwrap();
    assert_eq!(p.table.columns[0].ty, SqlType::Numeric(None));
    assert_eq!(p.table.columns[1].ty, SqlType::Text(None));
}

/// Table `(at date, x double precision, n bigint)`.
fn measured() -> TableInfo {
    let col = |name: &str, ty| Column::new(name, ty, true);
    TableInfo {
        columns: vec![
            col("at", SqlType::Date),
            col("x", SqlType::Float(64)),
            col("n", SqlType::Int(64)),
        ],
        key: vec![],
        ..TableInfo::default()
    }
}

#[test]
fn widen_takes_a_column_to_text_only_for_text() {
    // nulls fit anything: nothing changes
    let b = batch(vec![ins(json!({"at": null, "x": null, "n": null}))]);
    let p = plan(&b, Some(&measured()), &default_policy()).unwrap();
    assert!(!p.has_ddl());
    // a fraction, an instant: still numbers and times
    let b = batch(vec![
        ins(json!({"at": "2024-01-02", "x": 1, "n": 7})),
        ins(json!({"at": "2024-01-02T03:04:05+01:00", "x": 2.5, "n": 2.5})),
    ]);
    let p = plan(&b, Some(&measured()), &default_policy()).unwrap();
    assert_eq!(p.alter, vec!["at".to_string(), "n".to_string()]);
    let types: Vec<&SqlType> = p.table.columns.iter().map(|c| &c.ty).collect();
    assert_eq!(
        types,
        [
            &SqlType::Timestamp,
            &SqlType::Float(64),
            &SqlType::Float(64)
        ]
    );
    // text makes text, and the row is written as text
    let b = batch(vec![ins(json!({"x": "calm", "at": "soon", "n": 3}))]);
    let p = plan(&b, Some(&measured()), &default_policy()).unwrap();
    assert_eq!(p.alter, vec!["x".to_string(), "at".to_string()]);
    assert_eq!(p.table.column("x").unwrap().ty, SqlType::Text(None));
    assert_eq!(
        written(&p)[0].1,
        &[
            Cell::Text("soon".into()),
            Cell::Text("calm".into()),
            Cell::Int(3)
        ]
    );
}

#[test]
fn declared_columns_widen_only_exactly() {
    let schema = Item::Schema {
        columns: obj(json!({"x": "double precision"})),
    };
    let b = batch(vec![schema.clone(), ins(json!({"x": "calm"}))]);
    match plan(&b, Some(&measured()), &default_policy()) {
        Err(PlanError::Drift { item: 1, message }) => {
            assert!(message.contains("double precision"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // a fresh table too: the declaration is the type
    assert!(matches!(
        plan(&b, None, &default_policy()),
        Err(PlanError::Drift { item: 1, .. })
    ));
}

#[test]
fn truncates_stay_in_order_or_are_counted() {
    let b = batch(vec![
        ins(json!({"id": 1})),
        Item::Truncate,
        ins(json!({"id": 2})),
    ]);
    let p = plan(&b, Some(&table()), &default_policy()).unwrap();
    assert!(matches!(
        p.steps.as_slice(),
        [Step::Write { .. }, Step::Truncate, Step::Write { .. }]
    ));
    let mut pol = default_policy();
    pol.truncate = TruncatePolicy::Ignore;
    let p = plan(&b, Some(&table()), &pol).unwrap();
    assert_eq!(p.counts.ignored_truncates, 1);
    assert!(matches!(p.steps.as_slice(), [Step::Write { rows, .. }] if rows.len() == 2));
}

#[test]
fn upsert_groups_by_shape_dedupes_keys_and_deletes_in_order() {
    let mut pol = default_policy();
    pol.mode = WriteMode::Upsert;
    let b = batch(vec![
        ins(json!({"id": 1, "name": "a"})),
        rec(Op::Update, json!({"id": 1, "name": "b"})),
        rec(Op::Update, json!({"id": 2})),
        rec(Op::Delete, json!({"id": 1})),
        ins(json!({"id": 1, "name": "c"})),
    ]);
    let p = plan(&b, Some(&table()), &pol).unwrap();
    match p.steps.as_slice() {
        [Step::Write {
            rows: a,
            upsert: true,
            ..
        }, Step::Write { rows: b, .. }, Step::Delete { rows: d }, Step::Write { rows: c, .. }] => {
            assert_eq!(a.iter().map(|r| r.item).collect::<Vec<_>>(), vec![1]);
            assert_eq!(b[0].cells, vec![Cell::Int(2)]);
            assert_eq!(d[0].cells, vec![Cell::Int(1)]);
            assert_eq!(c[0].item, 4);
        }
        other => panic!("{other:?}"),
    }
    let b = batch(vec![rec(Op::Delete, json!({"name": "x"}))]);
    assert!(matches!(
        plan(&b, Some(&table()), &pol),
        Err(PlanError::Rejected { item: 0, .. })
    ));
}

/// A table without a key takes what PostgreSQL's own subscriber takes:
/// inserts appended, a delete of one row equal to the old row; an update
/// cannot say which row it changes.
#[test]
fn a_table_without_a_key_appends_and_deletes_by_the_whole_row() {
    let pol = Policy {
        mode: WriteMode::Upsert,
        ..default_policy()
    };
    let mut keyless = table();
    keyless.key.clear();
    let b = batch(vec![
        ins(json!({"id": 1, "name": "a"})),
        rec(Op::Delete, json!({"id": 1, "name": null})),
    ]);
    let p = plan(&b, Some(&keyless), &pol).unwrap();
    match p.steps.as_slice() {
        [Step::Write { upsert: false, .. }, Step::DeleteOne { columns, row }] => {
            assert_eq!(columns, &vec![0, 1]);
            assert_eq!(row.cells, vec![Cell::Int(1), Cell::Null]);
        }
        other => panic!("{other:?}"),
    }
    let one = batch(vec![ins(json!({"id": 1}))]);
    let fresh = plan(&one, None, &pol).unwrap();
    assert!(fresh.create && fresh.table.key.is_empty());
    let b = batch(vec![rec(Op::Update, json!({"id": 1}))]);
    assert!(matches!(
        plan(&b, Some(&keyless), &pol),
        Err(PlanError::Rejected { item: 0, .. })
    ));
}

#[test]
fn soft_deletes_add_their_column_once_and_mark_the_table() {
    let soft = Policy {
        mode: WriteMode::Upsert,
        deletes: DeletePolicy::Soft,
        ..default_policy()
    };
    let b = batch(vec![
        ins(json!({"id": 1})),
        rec(Op::Delete, json!({"id": 1})),
    ]);
    let p = plan(&b, Some(&table()), &soft).unwrap();
    assert_eq!(p.add, vec!["_abrq_deleted_at".to_string()]);
    assert!(p.table.soft_delete);
    assert_eq!(
        p.table.column("_abrq_deleted_at").unwrap().ty,
        SqlType::Timestamp
    );
    assert!(matches!(p.steps.last(), Some(Step::Delete { .. })));
    let again = plan(&b, Some(&p.table), &soft).unwrap();
    assert!(!again.has_ddl());
    let fresh = plan(&b, None, &soft).unwrap();
    assert!(fresh.create && fresh.table.column("_abrq_deleted_at").is_some());
}

#[test]
fn schema_instructions_widen_or_are_counted_as_ignored() {
    let b = batch(vec![Item::Schema {
        columns: obj(json!({"id": "bigint", "name": "text", "new": "int"})),
    }]);
    let p = plan(&b, Some(&table()), &default_policy()).unwrap();
    assert_eq!(p.alter, vec!["name".to_string()]);
    assert_eq!(p.add, vec!["new".to_string()]);
    assert_eq!(p.counts.ignored_schemas, 0);
    let p = plan(
        &b,
        Some(&table()),
        &policy(ColumnsPolicy::Freeze, TypesPolicy::Freeze),
    )
    .unwrap();
    assert!(!p.has_ddl());
    assert_eq!(p.counts.ignored_schemas, 1);
}

#[test]
fn bad_field_names_are_rejected_not_truncated() {
    let mut fields = Map::new();
    fields.insert("x".repeat(64), json!(1));
    let b = batch(vec![
        ins(json!({"id": 1})),
        Item::Record(Record::insert(fields)),
    ]);
    match plan(&b, Some(&table()), &default_policy()) {
        Err(PlanError::Names(bad)) => assert_eq!(bad.items().collect::<Vec<_>>(), vec![1]),
        other => panic!("{other:?}"),
    }
}

fn mysql(columns: ColumnsPolicy) -> Policy {
    Policy {
        dialect: Dialect::Mysql,
        ..policy(columns, TypesPolicy::Widen)
    }
}

#[test]
fn mysql_names_are_checked_for_the_whole_batch() {
    let b = batch(vec![
        ins(json!({"id": 1, "name": "a"})),
        ins(json!({"id": 2, "Name": "b"})),
        ins(json!({"id": 3, "trail ": "c"})),
        ins(json!({"id": 4})),
        ins(json!({"id": 5, "smile😀": "d", "NAME": "e"})),
        // null values make no column, so no collision
        ins(json!({"id": 6, "nAmE": null})),
    ]);
    let Err(PlanError::Names(bad)) = plan(&b, None, &mysql(ColumnsPolicy::Evolve)) else {
        panic!("not refused")
    };
    assert_eq!(bad.items().collect::<Vec<_>>(), vec![1, 2, 4]);
    let text = bad.to_string();
    for part in [
        r#"record 1: field "Name" collides with "name" (MySQL column names are case-insensitive)"#,
        r#"record 2: field "trail ": the name ends with ' '"#,
        r#"record 4: field "smile😀": the name contains '😀' (U+1F600)"#,
        r#"field "NAME" collides with "name""#,
    ] {
        assert!(text.contains(part), "{part} not in {text}");
    }
    // PostgreSQL takes every one of them as a column of its own
    let p = plan(&b, None, &default_policy()).unwrap();
    assert_eq!(p.table.columns.len(), 6);
}

#[test]
fn mysql_fields_colliding_with_columns_are_refused_only_when_added() {
    let b = batch(vec![
        ins(json!({"id": 1, "NAME": "x"})),
        Item::Schema {
            columns: obj(json!({"Id": "bigint", "extra": "int", "EXTRA": "text"})),
        },
    ]);
    let Err(PlanError::Names(bad)) = plan(&b, Some(&table()), &mysql(ColumnsPolicy::Evolve)) else {
        panic!("not refused")
    };
    assert_eq!(
        bad.to_string(),
        r#"record 0: field "NAME" collides with column "name" of the table (MySQL column names are case-insensitive)"#
    );
    // nothing is added under discard_values: the value goes, as any other
    let p = plan(&b, Some(&table()), &mysql(ColumnsPolicy::DiscardValues)).unwrap();
    assert!(!p.has_ddl());
    assert_eq!(p.counts.dropped_values, 1);
    // declarations: a case twin of a column is ignored, of another
    // declaration too (the first spelling stays)
    let b = batch(vec![b.items[1].clone()]);
    let p = plan(&b, Some(&table()), &mysql(ColumnsPolicy::Evolve)).unwrap();
    assert_eq!(p.add, vec!["extra".to_string()]);
    assert_eq!(p.counts.ignored_schemas, 1);
    let p = plan(&b, None, &mysql(ColumnsPolicy::Evolve)).unwrap();
    let names: Vec<&str> = p.table.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, vec!["Id", "extra"]);
}

#[test]
fn a_created_table_follows_its_source_key_to_other_columns() {
    let schema = |key: &str| Item::Schema {
        columns: obj(json!({
            "id": {"type": "bigint", "primary_key": key == "id"},
            "name": {"type": "text", "primary_key": key == "name"},
        })),
    };
    let b = batch(vec![
        schema("id"),
        rec(Op::Delete, json!({"id": 1})),
        schema("name"),
        rec(Op::Delete, json!({"name": "b"})),
        ins(json!({"id": 3, "name": "c"})),
    ]);
    let upsert = Policy {
        mode: WriteMode::Upsert,
        ..default_policy()
    };
    // a table abrq did not create keeps its key
    let p = plan(&b, Some(&table()), &upsert).unwrap_err();
    assert!(p.to_string().contains("no value for key column"), "{p}");
    let created = TableInfo {
        created: true,
        ..table()
    };
    let p = plan(&b, Some(&created), &upsert).unwrap();
    assert_eq!(p.rekey, vec!["id".to_string()]);
    assert_eq!(p.table.key, vec!["name".to_string()]);
    assert!(!p.table.column("name").unwrap().nullable);
    // the delete from before the move finds its row by the old key
    assert!(matches!(
        &p.steps[0],
        Step::DeleteOne { columns, row } if columns == &[0] && row.cells == [Cell::Int(1)]
    ));
    assert!(matches!(&p.steps[1], Step::Delete { rows } if rows.len() == 1));
    // a configured key never moves
    let fixed = Policy {
        key: vec!["id".into()],
        ..upsert
    };
    assert!(plan(&b, Some(&created), &fixed).is_err());
}

#[test]
fn values_an_engine_has_no_form_for_widen_a_declared_column_to_text() {
    let declared = |ty: &str| Item::Schema {
        columns: obj(json!({ "id": "bigint", "v": ty })),
    };
    let mysql = Policy {
        dialect: Dialect::Mysql,
        ..default_policy()
    };
    // NaN in a MySQL decimal, deep JSON in MariaDB's json
    let deep: Value =
        serde_json::from_str(&format!("{}1{}", "[".repeat(40), "]".repeat(40))).unwrap();
    for (ty, v) in [
        ("numeric", json!("NaN")),
        ("double precision", json!("-Infinity")),
        ("date", json!("infinity")),
        ("json", deep),
    ] {
        let b = batch(vec![declared(ty), ins(json!({"id": 1, "v": v}))]);
        let p = plan(&b, None, &mysql).unwrap();
        assert_eq!(p.table.column("v").unwrap().ty, SqlType::Text(None), "{ty}");
        let strict = Policy {
            drift: SchemaDrift {
                columns: ColumnsPolicy::Evolve,
                types: TypesPolicy::WidenStrict,
                ..SchemaDrift::default()
            },
            ..mysql.clone()
        };
        assert!(
            matches!(plan(&b, None, &strict), Err(PlanError::Drift { .. })),
            "{ty}"
        );
    }
    // PostgreSQL holds NaN and infinite dates; not MySQL's zero dates
    let b = batch(vec![declared("numeric"), ins(json!({"id": 1, "v": "NaN"}))]);
    let p = plan(&b, None, &default_policy()).unwrap();
    assert_eq!(p.table.column("v").unwrap().ty, SqlType::Numeric(None));
    let b = batch(vec![
        declared("date"),
        ins(json!({"id": 1, "v": "0000-00-00"})),
    ]);
    let p = plan(&b, None, &default_policy()).unwrap();
    assert_eq!(p.table.column("v").unwrap().ty, SqlType::Text(None));
}

/// A declaration naming each column's source column.
fn numbered(cols: &[(&str, &str, i64)]) -> Item {
    let columns = cols
        .iter()
        .map(|(name, ty, n)| ((*name).to_string(), json!({"type": ty, "source_column": n})))
        .collect();
    Item::Schema { columns }
}

/// Table `(id bigint, a text, c text)` labelled with source columns 1, 2, 3.
fn labelled() -> TableInfo {
    let col = |name: &str, ty, n| Column {
        source: Some(n),
        ..Column::new(name, ty, name != "id")
    };
    TableInfo {
        columns: vec![
            col("id", SqlType::Int(64), 1),
            col("a", SqlType::Text(None), 2),
            col("c", SqlType::Text(None), 3),
        ],
        key: vec!["id".into()],
        ..TableInfo::default()
    }
}

#[test]
fn a_renamed_source_column_renames_the_column_and_keeps_earlier_records() {
    let b = batch(vec![
        ins(json!({"id": 1, "a": "before"})),
        numbered(&[("id", "bigint", 1), ("name", "text", 2), ("c", "text", 3)]),
        ins(json!({"id": 2, "name": "after"})),
    ]);
    let p = plan(&b, Some(&labelled()), &default_policy()).unwrap();
    assert_eq!(p.rename, vec![("a".to_string(), "name".to_string())]);
    assert!(
        p.add.is_empty(),
        "no new column for the rename: {:?}",
        p.add
    );
    assert!(p.drop.is_empty() && p.label.is_empty());
    let names: Vec<&str> = p.table.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["id", "name", "c"]);
    // the record written before the rename lands in the renamed column
    let rows = written(&p);
    assert_eq!(rows.len(), 2);
    assert!(rows[0].1.contains(&Cell::Text("before".into())), "{rows:?}");
}

#[test]
fn a_dropped_source_column_is_kept_or_dropped_as_the_policy_says() {
    let b = batch(vec![
        numbered(&[("id", "bigint", 1), ("a", "text", 2)]),
        ins(json!({"id": 2, "a": "x"})),
    ]);
    let keep = plan(&b, Some(&labelled()), &default_policy()).unwrap();
    assert!(keep.drop.is_empty());
    assert!(keep.table.column("c").is_some());
    let drop = Policy {
        drift: SchemaDrift {
            dropped_columns: super::config::DroppedColumnsPolicy::Drop,
            ..SchemaDrift::default()
        },
        ..default_policy()
    };
    let p = plan(&b, Some(&labelled()), &drop).unwrap();
    assert_eq!(p.drop, ["c"]);
    assert!(p.table.column("c").is_none());
    // frozen columns follow nothing
    let frozen = Policy {
        drift: SchemaDrift {
            columns: ColumnsPolicy::Freeze,
            dropped_columns: super::config::DroppedColumnsPolicy::Drop,
            ..SchemaDrift::default()
        },
        ..default_policy()
    };
    let p = plan(&b, Some(&labelled()), &frozen).unwrap();
    assert!(p.drop.is_empty() && p.rename.is_empty());
}

#[test]
fn columns_are_labelled_once_with_their_source_column() {
    let unlabelled = TableInfo {
        columns: vec![
            Column::new("id", SqlType::Int(64), false),
            Column::new("a", SqlType::Text(None), true),
        ],
        key: vec!["id".into()],
        ..TableInfo::default()
    };
    let b = batch(vec![
        numbered(&[("id", "bigint", 1), ("a", "text", 2)]),
        ins(json!({"id": 1, "a": "x"})),
    ]);
    let p = plan(&b, Some(&unlabelled), &default_policy()).unwrap();
    assert_eq!(p.label, ["id", "a"]);
    assert_eq!(p.table.column("a").unwrap().source, Some(2));
    let again = plan(&b, Some(&p.table), &default_policy()).unwrap();
    assert!(again.label.is_empty() && !again.has_ddl());
    // without numbers for every column, a declaration labels nothing
    let partial = batch(vec![Item::Schema {
        columns: obj(json!({"id": {"type": "bigint", "source_column": 1}, "a": "text"})),
    }]);
    assert!(plan(&partial, Some(&unlabelled), &default_policy())
        .unwrap()
        .label
        .is_empty());
}
