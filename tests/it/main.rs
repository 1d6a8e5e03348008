mod sim_server;
