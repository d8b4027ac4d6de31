"""The Korean message of every error the page shows: one table, keyed by error code or kind (models/errors.py).

A template takes the error's params, and `{message}` (the error's own one-line text, for kinds whose detail has no
translation). Nothing here reads an error's text to decide what it is.
"""

from __future__ import annotations

from models.errors import KeemError, described

LOADING = "모델을 불러오는 중입니다. 잠시 뒤 다시 시도해 주세요 (이 줄은 준비되면 바뀝니다)."
# what follows gpu_stopped on the progress line (chatbot/web/catch_up.py): the update is still pending, or gave up
GPU_CONTINUES = "다음에 대화를 시작하거나 끝낼 때 이어서 갱신합니다."
GPU_GAVE_UP = "여러 번 시도해도 끝나지 못해 멈췄습니다. 기억 탭의 '실패한 갱신 다시 시도'로 다시 해 볼 수 있습니다."
STORED_OTHER = "예상하지 못한 오류가 났습니다"  # a stored error whose kind's message needs its (English) text
UNEXPECTED = "예상하지 못한 오류가 났습니다. 잠시 뒤 다시 시도해 주세요 (서버 로그에 기록되었습니다)."

# how the model info (behind ⓘ) names a model (chatbot/web/render.py model_name); never a server address
MODEL_INFO = {
    "demo": "SmolLM2-135M (데모 모델: 한국어를 하지 못하는 작은 영어 모델, 이 컴퓨터의 CPU에서 실행)",
    "found": "{model} (이 컴퓨터의 {server}에서 자동으로 찾은 한국어 모델)",
    "openai": "{model} (OpenAI 호환 서버)",
    "hf": "{model} (이 컴퓨터에서 실행)",
    "other": "{model}",
}
# the chat tab's note while the demo model answers (chatbot/web/app.py demo_box): what it cannot do, what works
# anyway, and how to connect a Korean model (models/local.py finds it by itself)
DEMO_TITLE = "⚠️ 지금은 데모 모델이라 한국어로 대화하지 못합니다"
DEMO_NOTE = (
    "지금 답하는 모델(SmolLM2-135M)은 이 컴퓨터의 CPU에서 도는 아주 작은 영어 모델입니다. 한국어로 말을 걸면 "
    "어색한 한국어나 영어로 답합니다. 앱이 고장 난 것이 아닙니다.\n\n"
    "**그래도 되는 것**: 대화를 나누고 **대화 끝내기**를 누르면 이번 대화가 기억으로 저장됩니다 (데모 모델에게는 "
    "요약을 맡기지 않아, 하신 말을 그대로 적어 둡니다). **기억** 탭에서 그 기억을 보고 고치고 지울 수 있고, "
    "**지난 대화** 탭에서 끝낸 대화를 다시 볼 수 있습니다.\n\n"
    "**한국어 모델로 바꾸려면** (이 컴퓨터에서, 세 단계):\n\n"
    "1. Ollama를 설치합니다 (ollama.com).\n"
    "2. 터미널에서 `ollama pull exaone3.5:7.8b` 를 실행합니다.\n"
    "3. 이 앱을 다시 시작합니다 (`make run`). 앱이 Ollama·llama.cpp·LM Studio·vLLM 서버의 한국어 모델을 스스로 찾아 "
    "씁니다."
)
DEMO_INFO = "데모 모델은 한국어를 하지 못합니다. 한국어 모델을 연결하는 방법은 대화 탭 위의 안내에 있습니다."
# the emotion timeline when the update model is never asked (the demo): no emotion is recorded, not "none yet"
NO_EMOTIONS_RECORDED = (
    "_이 기억 갱신 모델(데모 모델)은 감정을 기록하지 않습니다. 한국어 모델로 대화를 끝내면 느낀 감정과 그 이유가 "
    "여기에 남습니다._"
)
# Gradio's own words where its Korean lacks them (English) or reads badly (launch's i18n, chatbot/web/app.py)
GRADIO_WORDS = {
    "chatbot.copy_message": "메시지 복사",
    "chatbot.copied_message": "복사했습니다",
    "login.incorrect_credentials": "아이디나 비밀번호가 맞지 않습니다. 다시 입력해 주세요.",
}
# aria labels Gradio writes in English with no translation key, renamed in the page (chatbot/web/style.py HEAD):
# an exact label, or a prefix before the message's own text
ARIA_LABELS = {
    "chatbot conversation": "대화 내용",
    "Copy conversation": "대화 전체 복사",
    "Copied conversation": "대화 전체를 복사했습니다",
    "More tabs": "다른 탭",
    "Close": "닫기",
}
ARIA_PREFIXES = {
    "user's message: ": "내 메시지: ",
    "bot's message: ": "챗봇의 답: ",
    "assistant's message: ": "챗봇의 답: ",
}
# the pop-up notices' titles by kind (chatbot/web/toasts.py; Gradio 6 shows its English kind, renamed by style.py)
TOAST_TITLES = {"info": "알림", "warning": "확인해 주세요", "error": "오류", "success": "완료"}

MESSAGES = {
    # codes (models/errors.py CODES)
    # the page's own refusals (a tab with no conversation, a pick, a confirmation, a trial's steps)
    "not_started": "먼저 이름을 입력하고 대화를 시작하세요.",
    "sentence_not_picked": "고칠 문장을 먼저 고르세요.",
    "sentence_not_in_list": "고칠 문장을 목록에서 고르세요.",
    "list_changed": "그 사이 기억이 바뀌었습니다. 목록에서 다시 고르세요.",
    "erase_unconfirmed": "완전히 지우려면 먼저 확인란에 표시하세요. 되돌릴 수 없습니다.",
    "forget_name_mismatch": "확인란에 이름을 정확히 입력해야 삭제됩니다.",
    "past_not_found": "그 대화를 찾을 수 없습니다. 목록에서 다시 고르세요.",
    "reply_busy": "지금 답하는 중입니다. 답변이 끝난 뒤 다시 눌러 주세요.",
    "session_over": "끝난 대화입니다. 새 대화를 시작해 주세요.",
    "nothing_to_redo": "다시 답할 메시지가 없습니다. 먼저 메시지를 보내 주세요.",
    "nothing_to_stop": "멈출 답변이 없습니다.",
    "consent_no_name": "먼저 이름 또는 참가자 코드를 입력하고 '대화 시작'을 누르세요.",
    "consent_unticked": "동의하시면 먼저 '위 내용을 읽었고 참여에 동의합니다'에 표시해 주세요.",
    "questionnaire_none": "답할 설문이 없습니다. 대화를 끝내면 설문이 나옵니다.",
    "organiser_off": "연구자 화면이 꺼져 있습니다: 서버에 KEEM_ADMIN_PASSWORD를 설정하고 다시 시작하세요.",
    "organiser_wrong": "연구자 비밀번호가 틀렸습니다.",
    "organiser_locked": "연구자 비밀번호를 먼저 입력하세요.",
    "models_failed": "모델을 불러오지 못했습니다. 관리자에게 알려 주세요 (서버 로그에 까닭이 있습니다).",
    "setting_invalid": "서버 설정 {name}이 잘못되었습니다. 관리자에게 알려 주세요.",
    "empty_message": "빈 메시지입니다. 내용을 입력해 주세요 (공백이나 제어 문자만으로는 보낼 수 없습니다).",
    "message_too_long": "메시지가 너무 깁니다 ({length:,}자, 최대 {limit:,}자). 나누어 보내 주세요.",
    "message_too_many_tokens": (
        "메시지가 이 모델에 너무 깁니다 ({tokens:,}토큰, 최대 {limit:,}토큰). 나누어 보내 주세요."
    ),
    "bad_user_name": "이름은 1~64자의 한글·영문·숫자·공백과 . @ _ - 만 쓸 수 있습니다 (마크업·따옴표 불가).",
    "models_loading": LOADING,
    "storage_full": "서버의 저장 공간이 가득 찼습니다. 이미 저장된 대화와 기억은 안전합니다. 관리자에게 알려 주세요.",
    "storage_read_only": "서버의 데이터베이스에 쓸 수 없습니다 (읽기 전용). 관리자에게 알려 주세요.",
    "storage_folder": "서버의 데이터베이스 설정이 잘못되었습니다 (폴더를 가리킴). 관리자에게 알려 주세요.",
    "storage_not_sqlite": "서버의 데이터베이스 파일이 손상되었거나 다른 파일입니다. 관리자에게 알려 주세요.",
    "storage_other": "서버의 데이터베이스를 쓸 수 없습니다. 관리자에게 알려 주세요.",
    "storage_scheme": "서버의 데이터베이스 설정이 잘못되었습니다 (지원하지 않는 주소). 관리자에게 알려 주세요.",
    "storage_postgres": "서버의 데이터베이스(Postgres)에 연결할 수 없습니다. 잠시 뒤 다시 시도해 주세요.",
    "storage_busy": "서버의 데이터베이스가 다른 작업으로 바쁩니다. 잠시 뒤 다시 시도해 주세요.",
    "migration_newer": "서버의 데이터베이스를 더 새로운 버전의 keem이 썼습니다. 관리자에게 알려 주세요.",
    "migration_failed": "서버의 데이터베이스를 새 형식으로 바꾸지 못했습니다. 관리자에게 알려 주세요.",
    "questionnaire_unknown": "이 설문에 없는 문항입니다: {items}",
    "questionnaire_missing": "'{question}' 문항에 답해 주세요.",
    "questionnaire_range": "'{question}' 문항의 답은 {low}에서 {high} 사이의 하나여야 합니다.",
    "questionnaire_text": "'{question}' 문항에는 글로 답해 주세요.",
    "questionnaire_too_long": "'{question}' 답이 너무 깁니다 ({length:,}자, 최대 {limit:,}자). 줄여 주세요.",
    "questionnaire_no_session": "이 참가자의 대화가 아닌 설문입니다. 자신의 대화 뒤에 나온 설문에 답해 주세요.",
    "questionnaire_done": "이미 응답한 설문입니다. 한 대화의 설문은 한 번만 제출할 수 있습니다.",
    "questionnaire_empty": "설문에 답한 항목이 없습니다. 답을 고른 뒤 제출해 주세요.",
    "memory_changed": (
        "그 사이 다른 탭이나 기억 갱신이 이 문장을 바꿨습니다. 지금 기억(버전 {number})을 다시 불러왔으니 "
        "확인한 뒤 다시 고쳐 주세요."
    ),
    "memory_recompute": "기억 갱신이 그 사이 바뀐 기억 위에서 다시 계산됩니다. 잠시 뒤 기억 탭을 확인해 주세요.",
    "user_forgotten": (
        "이 사용자의 데이터가 삭제되었습니다 (다른 탭이나 관리 명령에서 '나를 잊기'). 이 탭의 대화는 저장되지 "
        "않았습니다. 처음 화면으로 돌아갑니다: 다시 대화하려면 이름을 입력해 새로 시작하세요."
    ),
    "study_wait": "다음 대화는 {when} ({zone}) 이후에 할 수 있습니다.",
    "study_done": "이 연구의 대화를 모두 마치셨습니다. 참여해 주셔서 감사합니다.",
    "study_open_elsewhere": "다른 창에서 하고 있는 대화가 있습니다. 그 대화를 끝낸 뒤 여기서 이야기해 주세요.",
    "organiser_wait": "비밀번호는 1초에 한 번만 확인합니다. 잠시 뒤 다시 입력해 주세요.",
    "erase_unknown_sentence": "지금 기억에 없는 문장입니다. 목록에서 다시 고르세요.",
    "erase_last_sentence": (
        "지금 기억에 남은 문장이 이것뿐이라 지울 수 없습니다 (기억은 비워 둘 수 없습니다). "
        "모두 지우려면 '나를 잊기'를 쓰세요."
    ),
    "erase_update_running": (
        "지금 기억을 갱신하는 중입니다. 갱신이 끝난 뒤 다시 지워 주세요 (지운 내용이 되살아나지 않도록)."
    ),
    "restore_unknown_sentence": (
        "이 사용자의 지난 기억에 없는 문장입니다. 바뀐 것 목록을 다시 불러왔으니 확인해 주세요."
    ),
    "restore_present": "이미 지금 기억에 있는 문장입니다.",
    "revert_nothing": "되돌릴 갱신이 없습니다 (지금 기억은 버전 {latest}입니다).",
    "model_server_down": (
        "모델 서버에 연결할 수 없습니다. 서버가 꺼져 있거나 주소가 바뀌었을 수 있습니다. 잠시 뒤 다시 시도해 주세요."
    ),
    "model_refused": "모델 서버가 이 요청을 거절했습니다. 메시지를 조금 바꿔 다시 보내 보세요.",
    "model_server_failed": "모델 서버가 여러 번 시도해도 오류로 답했습니다. 잠시 뒤 다시 시도해 주세요.",
    "gpu_stopped": "기억 갱신이 GPU 시간 안에 끝나지 못했습니다. 이전 기억은 그대로입니다.",
    "delete_last_sentence": (
        "마지막 남은 문장은 지울 수 없습니다 (기억은 비워 둘 수 없습니다). 모두 지우려면 '나를 잊기'를 쓰세요."
    ),
    "sentence_unknown": "지금 기억(버전 {number})에 없는 문장입니다. 기억을 다시 불러와 고르세요.",
    "token_missing": "API 토큰이 없습니다. Authorization: Bearer <토큰> 헤더를 보내 주세요 (keem token create).",
    "token_invalid": "API 토큰이 맞지 않거나 취소되었습니다. 새 토큰을 받아 주세요 (keem token create).",
    "token_needs_user": "앱 토큰의 요청에는 사용자(user)를 적어야 합니다.",
    "rate_limited": "요청이 너무 많습니다. {retry_after}초 뒤 다시 시도해 주세요.",
    "not_found": "찾을 수 없습니다.",
    "if_match_required": "기억을 바꾸려면 읽은 버전을 If-Match 헤더로 보내 주세요.",
    "body_too_large": "요청이 너무 큽니다 (최대 {limit:,}바이트).",
    "bad_body": "요청 형식이 맞지 않습니다: {detail}",
    "idempotency_key_reused": "이 Idempotency-Key는 다른 메시지에 쓰였습니다. 메시지마다 새 키를 만들어 주세요.",
    "idempotency_stale": "이 메시지는 저장되었지만 온전한 답 전에 대화가 넘어갔습니다. 새 키로 다시 보내 주세요.",
    "study_api_off": "이 연구에서는 API로 대화할 수 없습니다.",
    "study_consent": "연구 참여 동의가 먼저 필요합니다. 페이지에서 동의해 주세요.",
    "study_own_model": "이 연구의 대화는 연구용 챗봇과만 나눌 수 있습니다.",
    # kinds: an error raised without a code (its detail has no translation, so it is shown as written)
    "error": "오류: {message}",
    "input": "오류: {message}",
    "context_overflow": (
        "대화와 기억이 모델이 한 번에 읽을 수 있는 길이를 넘었습니다. 메시지를 줄이거나 새 대화를 시작해 주세요."
    ),
    "unknown_user": "오류: {message}",
    "access": "오류: {message}",
    "model_spec": "오류: {message}",
    "model_unavailable": "오류: {message}",
    "generation": "모델이 답을 끝까지 만들지 못했습니다. 잠시 뒤 다시 시도해 주세요.",
    "not_supported": "오류: {message}",
    "update": "기억을 바꿀 수 없습니다: {message}",
    "job_taken": "이 기억 갱신은 다른 작업자가 이어받았습니다. 잠시 뒤 기억 탭을 확인해 주세요.",
    "storage": "오류: {message}",
    "migration": "오류: {message}",
}


def korean_error(exc: BaseException) -> str:
    """A Korean, one-line message for an error: its code's entry in MESSAGES, else its kind's."""
    if not isinstance(exc, KeemError):
        return UNEXPECTED
    template = MESSAGES.get(exc.code or exc.kind, MESSAGES[exc.kind])
    params = {k: ", ".join(map(str, v)) if isinstance(v, list | tuple) else v for k, v in exc.params.items()}
    return template.format(**params, message=str(exc))


def korean_stored_error(text: str | None) -> str:
    """The Korean message of an error stored as one line (an update job's last error, models/errors.py `describe`):
    its code's or kind's entry when that needs nothing but the code, else a plain "unexpected error" (the stored
    line itself is technical detail, shown folded away)."""
    kind, code = described(text or "")
    template = MESSAGES.get(code or kind or "", "")
    return template if template and "{" not in template else STORED_OTHER


# The version history's labels (chatbot/web/history.py): what made each memory version, and why a safe-mode one
# is so, in plain Korean; no strategy name here (a blind trial's participant must not learn theirs).
LABELS = {
    "updater": "대화를 마친 뒤 기억을 새로 썼습니다",
    "updater_fallback": "안전 모드로 저장했습니다",
    "user": "직접 고쳤습니다",
    "import": "파일에서 가져왔습니다",
    "no_summary": (
        "기억 갱신 모델이 대화를 요약하지 못해(답이 잘렸거나 쓸 수 없는 답) 이전 기억에 이번 대화에서 하신 말을 "
        "그대로 덧붙였습니다"
    ),
    "not_asked": (
        "이 기억 갱신 모델(데모 모델)은 한국어 대화를 요약하지 못해 묻지 않았습니다. 대신 이번 대화에서 하신 말을 "
        "그대로 이전 기억에 덧붙였습니다 (감정과 그 이유는 기록하지 않았습니다)"
    ),
    "not_verified": "새로 쓴 기억이 검증을 통과하지 못해 이전 기억에 이번 대화의 요약을 덧붙였습니다",
    "rebased": "그 사이 바뀐 기억 위에 다시 맞췄습니다 (직접 고친 내용은 그대로 둡니다)",
    "erased": "완전히 지운 내용이 있어 그 부분을 [삭제됨]으로 바꿨습니다",
    "strategy": "{name} 방식",
    "zone": "시각은 {zone} 기준입니다.",
}
# Why a version the user made is as it is, by its notes' codes (memory/store/notes.py; chatbot/web/history.py
# note_text). `{to:으로}`: the parameter with the particle that fits it (memory/words.py particle). An updater's and
# an import's notes are technical and stay off the page (LABELS says why in plain words); `text` is a note from before
# codes, shown as written.
NOTES = {
    "edited": "사용자가 {sentence}번 문장을 고쳤습니다",
    "deleted": "사용자가 {sentence}번 문장을 지웠습니다",
    "added": "사용자가 문장을 추가했습니다",
    "restored": "사용자가 빠진 문장을 되살렸습니다",
    "reverted": "사용자가 버전 {to:으로} 되돌렸습니다",
    "rebased_user": "버전 {base}에서 한 변경을 버전 {onto} 위에 다시 맞춤",
    "rebased_update": "버전 {onto} 위에 다시 맞춤 (그 사이 사용자가 바꾼 내용 유지)",
    "erased": "[삭제됨] 사용자가 지운 문장",
    "text": "{text}",
}
