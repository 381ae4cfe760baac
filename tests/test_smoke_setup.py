def test_fixtures_work(client, personas):
    response = client.get("/api/v2/users/me", headers=personas["alice"].auth)
    assert response.status_code == 200
    assert response.json["username"] == "alice"
