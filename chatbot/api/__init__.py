"""The HTTP API (issue 30): KEEM chat's memory for other programs, under /v1/ on the app's own port.

A third front end beside the page (chatbot/web) and the CLI (chatbot/cli): every route calls the same core
(chatbot/bot.py, chatbot/session.py, chatbot/edits.py, memory/undo.py, memory/store/erasure.py) and answers the
same errors (models/errors.py codes) as JSON. auth.py reads bearer tokens and limits their rate; sessions.py keeps
each user's API conversation; chat.py is the OpenAI-compatible chat; memory.py the memory; jobs.py ending sessions,
update jobs and past conversations; errors.py the JSON errors; app.py puts them together.
"""
