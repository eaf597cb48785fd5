"""Extract one record per text file into JSONL, constrained by a pydantic model.

    .venv/bin/python examples/extract_folder/extract_records.py \\
        examples/extract_folder/samples -o people.jsonl

Every file in the folder becomes one line of the output: the fields of
:class:`Person`, guaranteed to parse (the JSON schema of the model constrains
decoding), plus the file name. The offline ``LLM`` batches all files at once and shows
a progress bar; it runs on the bundled SmolLM2-135M-Instruct unless ``--model`` says
otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from specdec import LLM, SamplingParams


class Person(BaseModel):
    """What we want from each text. Bounds keep the output short and always closed."""

    name: str = Field(max_length=60)
    age: int = Field(ge=0, le=130)
    city: str = Field(max_length=40)
    occupation: str = Field(max_length=40)


INSTRUCTION = ("Extract the person's name, age, city and occupation as JSON with keys "
               "name, age, city, occupation.\n\nText: ")


def read_texts(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.suffix in (".txt", ".md") and p.is_file())
    if not files:
        raise SystemExit(f"no .txt or .md files in {folder}")
    return files


def extract(llm: LLM, files: list[Path], max_tokens: int) -> list[dict]:
    conversations = [[{"role": "user", "content": INSTRUCTION + f.read_text().strip()}]
                     for f in files]
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    outputs = llm.chat(conversations, params, json_schema=Person)
    records = []
    for path, out in zip(files, outputs, strict=True):
        record: dict = {"file": path.name}
        try:
            record.update(Person.model_validate_json(out.text).model_dump())
        except ValidationError as exc:  # only if cut off by max_tokens
            record.update(error=f"{out.finish_reason}: {exc.errors()[0]['msg']}", raw=out.text)
        records.append(record)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("-o", "--output", type=Path, default=None, help="JSONL (default: stdout)")
    parser.add_argument("--model", default=None, help="local HF dir or .gguf (default: SmolLM2)")
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args(argv)

    files = read_texts(args.folder)
    records = extract(LLM(model=args.model), files, args.max_tokens)
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if args.output is None:
        sys.stdout.write(lines)
    else:
        args.output.write_text(lines)
        print(f"{len(records)} records -> {args.output}", file=sys.stderr)
    return 0 if all("error" not in r for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
