"""The page's CSS, all of it (chatbot/web/app.py launch_options passes it to every launch).

On a phone (up to 640 px wide, e.g. 390x844) the title shrinks and its line of explanation goes, the model details
stay behind their ⓘ, the chat is shorter so that the message box with 보내기 on its row and the session's actions
(대화 끝내기, the update's progress) fit on the first screen, and toasts sit at the bottom of the chat above the
message row, not over the buttons at the top (나가기).
"""

CSS = """
.keem-banner {font-size: 0.9em; opacity: 0.9}
#model-info > button {padding-top: 2px; padding-bottom: 2px}
#message-row {flex-wrap: nowrap; align-items: stretch}
#message-row > #message-input {min-width: 0}
#message-row > #send-button {min-width: 72px; flex: 0 0 auto}

@media (max-width: 640px) {
  .gradio-container {padding-left: 6px !important; padding-right: 6px !important}
  #title h1 {font-size: 1.25rem; margin: 0}
  #title p {display: none}
  #greeting p {margin: 0; font-size: 0.95em}
  #chat {height: calc(100dvh - 470px) !important; min-height: 180px; max-height: 420px}
  #session-actions {flex-wrap: nowrap}
  #session-actions > button {min-width: 0; flex: 1 1 0}
  .toast-wrap {top: auto !important; bottom: 150px !important; left: 8px !important; right: 8px !important;
    width: auto !important; max-width: none !important}
}
"""
