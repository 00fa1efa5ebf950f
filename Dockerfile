# A delayq image: `delayq node`, `delayq ingress`, `delayq db migrate` and the other commands.
#   docker build -t delayq .
#   docker run --rm -e DELAYQ_REDIS_URL=... delayq node
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY cluster cluster
COPY actors actors
COPY lua lua
COPY schema schema
RUN pip install --no-cache-dir . && rm -rf /src
WORKDIR /
USER nobody
ENTRYPOINT ["delayq"]
CMD ["node"]
