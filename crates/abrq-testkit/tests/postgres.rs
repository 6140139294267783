//! PostgreSQL through sqlx: a row round trip in a fresh database.

use std::time::Duration;

use abrq_testkit::{names, Postgres};
use sqlx::{Connection, Executor, PgConnection, Row};
use tokio::time::timeout;

async fn connect(url: &str) -> PgConnection {
    timeout(Duration::from_secs(10), PgConnection::connect(url))
        .await
        .expect("postgres connect timed out")
        .expect("postgres is unreachable; see scripts/services.sh status")
}

#[tokio::test]
async fn postgres_round_trip_in_fresh_database() {
    let pg = Postgres::from_env();
    let mut admin = connect(&pg.url).await;
    let db = names::database("pg-smoke");
    admin
        .execute(format!("CREATE DATABASE \"{db}\"").as_str())
        .await
        .expect("create database");

    let mut conn = connect(&pg.url_for(&db).expect("database url")).await;
    conn.execute("CREATE TABLE orders (id BIGINT PRIMARY KEY, body TEXT NOT NULL)")
        .await
        .expect("create table");
    sqlx::query("INSERT INTO orders (id, body) VALUES ($1, $2)")
        .bind(7_i64)
        .bind("seven")
        .execute(&mut conn)
        .await
        .expect("insert");
    let row = sqlx::query("SELECT id, body FROM orders")
        .fetch_one(&mut conn)
        .await
        .expect("select");
    assert_eq!(row.get::<i64, _>("id"), 7);
    assert_eq!(row.get::<String, _>("body"), "seven");
    conn.close().await.expect("close");

    admin
        .execute(format!("DROP DATABASE \"{db}\"").as_str())
        .await
        .expect("drop database");
}
