//! `agui-host chat`: the terminal AG-UI client on stdin and stdout.

use std::process::ExitCode;

use agui_host::chat_client::{self, ChatOptions};

use super::ChatArgs;

/// No settings and no logging, so nothing mixes into the conversation.
pub(crate) async fn chat(args: ChatArgs) -> ExitCode {
    let options = ChatOptions {
        url: args.url,
        thread_id: args.thread,
        client_tools: args.tools,
        headers: args.headers,
    };
    match chat_client::run(options, std::io::stdin().lock(), std::io::stdout()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("agui-host chat: {error}");
            ExitCode::FAILURE
        }
    }
}
