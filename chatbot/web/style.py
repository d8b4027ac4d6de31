"""The page's CSS, all of it (chatbot/web/app.py launch_options passes it to every launch). Gradio scopes it under
its own container's content (`.contain`): CSS for what lies outside it (toasts, the page's margins) is HEAD, a
<style> in the page's head.

On a phone (up to 640 px wide, e.g. 390x844) the title shrinks and its line of explanation goes, the model details
stay behind their ⓘ, the chat is shorter so that the message box with 보내기 on its row and the session's actions
(대화 끝내기, the update's progress) fit on the first screen, and toasts sit over the chat (a third of the way
down), not over the buttons at the top (나가기) or the message row. On a desktop toasts sit at the bottom left,
narrow, clear of the memory rows' actions on the right. After 대화 끝내기 the status card
(chatbot/web/ending.py) takes a line of its own under the message row, which keeps 보내기 beside the box.
The chat's own clear icon is hidden: it would only empty the screen (chatbot/web/replies.py).
In the memory tab each sentence's row (chatbot/web/editing.py) keeps its four actions on one line: beside the
sentence on a desktop, under it on a phone.
"""

import json

from chatbot.web.messages import ARIA_LABELS, ARIA_PREFIXES, TOAST_TITLES

CSS = """
.keem-banner {font-size: 0.9em; opacity: 0.9}
#model-info > button {padding-top: 2px; padding-bottom: 2px}
#message-row {flex-wrap: nowrap; align-items: stretch}
#message-row > #message-input {min-width: 0}
#message-row > #send-button {min-width: 72px; flex: 0 0 auto}
#chat button[aria-label="Clear"], #chat button[aria-label="대화 지우기"] {display: none}
#reply-actions {justify-content: flex-end; gap: 6px}
#past-pick input {padding-right: 32px !important; text-overflow: ellipsis}
.keem-sentence-row {align-items: center !important; flex-wrap: nowrap !important}
.keem-sentence-row > .keem-sentence-text {flex: 1 1 0 !important; min-width: 0 !important}
.keem-sentence-actions {flex: 0 0 auto !important; width: max-content !important; flex-wrap: nowrap !important}
.keem-sentence-actions {gap: 4px !important}
.keem-sentence-actions > button {flex: 0 0 auto !important; min-width: 56px !important; white-space: nowrap}
#add-row {flex-wrap: nowrap !important; align-items: stretch}
#add-row > #add-text {min-width: 0 !important}
#add-row > #add-button {flex: 0 0 auto !important; white-space: nowrap}

@media (max-width: 640px) {
  .column {gap: 8px !important}
  #title h1 {font-size: 1.25rem; margin: 0}
  #title p {display: none}
  #greeting p {margin: 0; font-size: 0.9em}
  #logout-button {flex: 0 0 auto; min-width: 64px}
  #chat {height: calc(100dvh - 510px) !important; min-height: 160px; max-height: 420px}
  #session-actions {flex-wrap: nowrap; gap: 8px}
  #session-actions > button {min-width: 0; flex: 1 1 0; padding: 8px 6px; font-size: 0.9rem; white-space: nowrap}
  #message-row {flex-wrap: wrap}
  #message-row > #message-input {flex: 1 1 0 !important}
  #message-row > #send-button {flex: 0 0 84px !important}
  #message-row > #end-card {flex: 1 1 100% !important; min-width: 100% !important}
  .keem-sentence-row {flex-wrap: wrap !important}
  .keem-sentence-row > .keem-sentence-text {flex: 1 1 100% !important}
  .keem-sentence-actions {flex: 1 1 100% !important; width: 100% !important}
  .keem-sentence-actions > button {flex: 1 1 auto !important; min-width: 0 !important; padding: 4px 6px !important}
  .keem-sentence button {min-height: 40px !important}
}
.keem-sentence-actions > .keem-erase {margin-left: 14px !important}
"""
# What lies outside the part Gradio scopes `css` to (its toasts, the page's margins): a <style> in the page's head
HEAD = """<style>
@media (min-width: 641px) {
  .gradio-container .toast-wrap {top: auto !important; bottom: 16px !important; left: 16px !important;
    right: auto !important; max-width: 320px !important}
}
@media (max-width: 640px) {
  .gradio-container .main.app {padding-left: 8px !important; padding-right: 8px !important}
  .gradio-container .toast-wrap {top: 30vh !important; bottom: auto !important; left: 8px !important;
    right: 8px !important; width: auto !important; max-width: none !important; pointer-events: none}
  .gradio-container .toast-wrap > * {pointer-events: auto}
}
</style>"""
# Gradio 6 titles a toast with its kind in English ("Warning"), whatever title it is given: the Korean title instead
HEAD += (
    "<style>"
    + "".join(
        f".gradio-container .toast-title.{kind} {{font-size: 0 !important}}"
        f'.gradio-container .toast-title.{kind}::before {{content: "{title}"; font-size: var(--text-md, 14px)}}'
        for kind, title in TOAST_TITLES.items()
    )
    + "</style>"
)
# Gradio's chat writes some aria labels in English with no translation key: renamed as they appear (messages.py)
ARIA_JS = (
    "<script>(() => {const exact = EXACT, prefixes = PREFIXES;"
    "const fix = el => {const label = el.getAttribute('aria-label'); if (!label) return;"
    " if (exact[label]) { el.setAttribute('aria-label', exact[label]); return; }"
    " for (const [p, k] of Object.entries(prefixes)) if (label.startsWith(p)) {"
    " el.setAttribute('aria-label', k + label.slice(p.length)); return; }};"
    "const sweep = root => { if (root.nodeType !== 1) return; fix(root);"
    " root.querySelectorAll('[aria-label]').forEach(fix); };"
    "new MutationObserver(ms => ms.forEach(m => m.type === 'attributes' ? fix(m.target) : m.addedNodes.forEach(sweep)))"
    ".observe(document.documentElement, {subtree: true, childList: true, attributes: true,"
    " attributeFilter: ['aria-label']});})();</script>"
)
HEAD += ARIA_JS.replace("EXACT", json.dumps(ARIA_LABELS, ensure_ascii=False)).replace(
    "PREFIXES", json.dumps(ARIA_PREFIXES, ensure_ascii=False)
)
