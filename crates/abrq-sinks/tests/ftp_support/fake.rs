//! A scripted FTP server for the replies pyftpdlib never gives: a refusal
//! to rename onto an existing name, a 552/553/452/421 to STOR, silence.
//! Files live in memory; every command is logged.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
pub struct Script {
    /// RNTO onto an existing file answers 553, as some servers do.
    pub refuse_overwrite: bool,
    /// The reply to every STOR instead of storing.
    pub stor_reply: Option<&'static str>,
    /// Never answer this command (e.g. "USER", "STOR").
    pub hang_on: Option<&'static str>,
}

#[derive(Default)]
pub struct State {
    pub files: HashMap<String, Vec<u8>>,
    pub log: Vec<String>,
    pub connections: usize,
}

pub struct Fake {
    pub port: u16,
    pub state: Arc<Mutex<State>>,
}

impl Fake {
    pub async fn start(script: Script) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let (script, st) = (Arc::new(script), state.clone());
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                st.lock().unwrap().connections += 1;
                tokio::spawn(session(conn, script.clone(), st.clone()));
            }
        });
        Fake { port, state }
    }

    pub fn log(&self) -> Vec<String> {
        self.state.lock().unwrap().log.clone()
    }

    pub fn connections(&self) -> usize {
        self.state.lock().unwrap().connections
    }
}

async fn session(conn: TcpStream, script: Arc<Script>, state: Arc<Mutex<State>>) {
    let (r, mut w) = conn.into_split();
    let mut lines = BufReader::new(r).lines();
    let mut pasv: Option<TcpListener> = None;
    let mut rnfr: Option<String> = None;
    let _ = w.write_all(b"220 fake ready\r\n").await;
    while let Ok(Some(line)) = lines.next_line().await {
        let (cmd, arg) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let cmd = cmd.to_ascii_uppercase();
        state.lock().unwrap().log.push(line.clone());
        if script.hang_on == Some(cmd.as_str()) {
            std::future::pending::<()>().await;
        }
        let reply: String = match cmd.as_str() {
            "USER" => "331 password please".into(),
            "PASS" => "230 in".into(),
            "TYPE" | "NOOP" => "200 ok".into(),
            "MKD" => "550 exists".into(),
            "QUIT" => "221 bye".into(),
            "PASV" => {
                let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let p = l.local_addr().unwrap().port();
                pasv = Some(l);
                format!(
                    "227 Entering Passive Mode (127,0,0,1,{},{})",
                    p / 256,
                    p % 256
                )
            }
            "STOR" => match (script.stor_reply, pasv.take()) {
                (Some(reply), _) => reply.into(),
                (None, Some(l)) => {
                    let _ = w.write_all(b"150 go\r\n").await;
                    let (mut data, _) = l.accept().await.unwrap();
                    let mut body = Vec::new();
                    let _ = data.read_to_end(&mut body).await;
                    state.lock().unwrap().files.insert(arg.into(), body);
                    "226 stored".into()
                }
                (None, None) => "425 no PASV".into(),
            },
            "RETR" => match (file(&state, arg), pasv.take()) {
                (Some(body), Some(l)) => {
                    let _ = w.write_all(b"150 go\r\n").await;
                    let (mut data, _) = l.accept().await.unwrap();
                    let _ = data.write_all(&body).await;
                    drop(data);
                    "226 sent".into()
                }
                _ => "550 no such file".into(),
            },
            "SIZE" => match state.lock().unwrap().files.get(arg) {
                Some(b) => format!("213 {}", b.len()),
                None => "550 no such file".into(),
            },
            "DELE" => match state.lock().unwrap().files.remove(arg) {
                Some(_) => "250 deleted".into(),
                None => "550 no such file".into(),
            },
            "RNFR" if state.lock().unwrap().files.contains_key(arg) => {
                rnfr = Some(arg.into());
                "350 ready".into()
            }
            "RNFR" => "550 no such file".into(),
            "RNTO" => {
                let mut st = state.lock().unwrap();
                match rnfr.take() {
                    Some(_) if script.refuse_overwrite && st.files.contains_key(arg) => {
                        "553 file exists".into()
                    }
                    Some(from) => {
                        let body = st.files.remove(&from).unwrap_or_default();
                        st.files.insert(arg.into(), body);
                        "250 renamed".into()
                    }
                    None => "503 RNFR first".into(),
                }
            }
            _ => "502 not implemented".into(),
        };
        if w.write_all(format!("{reply}\r\n").as_bytes())
            .await
            .is_err()
        {
            return;
        }
        if reply.starts_with("421") {
            return;
        }
    }
}

fn file(state: &Mutex<State>, path: &str) -> Option<Vec<u8>> {
    state.lock().unwrap().files.get(path).cloned()
}
